"""A stream of commands for the ingest tests, and the store it must leave: each command
applied once, in the order of its partition."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from typing import Any

from tocsin.abc import Store
from tocsin.testing.dispatch import wait_until


@dataclass
class Commands:
    """(message key, JSON value) in production order, and the expected final store."""

    messages: list[tuple[str, bytes]] = field(default_factory=list)
    expected: dict[str, tuple[str, Any]] = field(default_factory=dict)
    """schedule key → (status, payload)."""
    bad: int = 0


def make_commands(total: int) -> Commands:
    """``total`` commands: creates of ``k-<i>``; every 10th a cancel of an earlier create,
    every 17th a reschedule of one (refused when it was cancelled), every 500th not JSON."""
    out = Commands()

    def send(key: str, body: dict[str, Any] | str) -> None:
        value = body if isinstance(body, str) else json.dumps(body)
        out.messages.append((key, value.encode()))

    created = 0
    for i in range(total):
        if i % 500 == 499:
            send(f"bad-{i}", '{"op": "create", oops')
            out.bad += 1
        elif i % 10 == 9 and created > 5:
            key = f"k-{created - 5}"
            send(key, {"op": "cancel", "key": key})
            if out.expected[key][0] == "PENDING":
                out.expected[key] = ("CANCELLED", out.expected[key][1])
        elif i % 17 == 16 and created > 3:
            key = f"k-{created - 3}"
            payload = {"n": created - 3, "v": 2}
            send(key, {"op": "reschedule", "key": key, "payload": payload})
            if out.expected[key][0] == "PENDING":
                out.expected[key] = ("PENDING", payload)
        else:
            key = f"k-{created}"
            send(key, {"op": "create", "channel": "out", "payload": {"n": created},
                       "delay": 86_400, "key": key})
            out.expected[key] = ("PENDING", {"n": created})
            created += 1
    return out


def produce(bootstrap: str, topic: str, messages: list[tuple[str, bytes]], *,
            client: dict[str, str] | None = None) -> None:
    """Send ``messages`` keyed (a key's commands share a partition, as Java would place them);
    ``client``: more librdkafka settings (TLS)."""
    from confluent_kafka import Producer

    producer = Producer({**(client or {}), "bootstrap.servers": bootstrap,
                         "partitioner": "murmur2_random",
                         "linger.ms": 20, "enable.idempotence": False})
    for key, value in messages:
        while True:
            try:
                producer.produce(topic, value, key.encode())
                break
            except BufferError:
                producer.poll(0.1)
        producer.poll(0)
    assert producer.flush(60) == 0


def stored_state(store: Store) -> dict[str, tuple[str, Any]]:
    """schedule key → (status, payload) of every stored schedule (a key twice fails)."""
    out: dict[str, tuple[str, Any]] = {}
    after: str | None = None
    while page := store.list_schedules(after_id=after, limit=10_000):
        for s in page:
            assert s.key is not None and s.key not in out, s.key
            out[s.key] = (s.status.value, json.loads(s.payload))
        after = page[-1].id
    return out


def wait_for_state(store: Store, expected: dict[str, tuple[str, Any]], *,
                   timeout_s: float) -> dict[str, tuple[str, Any]]:
    """The store's state once it equals ``expected``, or the last seen after ``timeout_s``."""
    seen = [stored_state(store)]

    def settled() -> bool:
        seen.append(stored_state(store))
        return seen[-1] == expected

    with contextlib.suppress(AssertionError):  # the caller compares what was last seen
        wait_until(settled, timeout_s=timeout_s, interval_s=1.0, what="the expected state")
    return seen[-1]

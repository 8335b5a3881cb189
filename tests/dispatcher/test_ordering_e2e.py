"""Ordering keys end to end: 500 keys x 20 schedules with random due times, a receiver that
fails 20 % of deliveries at random, and a kill -9 of the dispatcher midway. At the receiver,
each key's first successful deliveries come in exactly (due time, sequence) order, and
nothing is lost.

It runs on PostgreSQL, the store of a deployment with several dispatchers. The ordering rule is
one statement over both dialects (``tocsin.stores.rows.head_of_key``), checked on both by the
deterministic dispatcher tests (``test_core.py``: a key in order, a backlog, a retrying head,
halt/continue) and on SQLite against a model (``tests/stores/test_ordering_model.py``)."""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
from tocsin.stores import open_store
from tocsin.testing.dispatch import wait_until
from tocsin.testing.processes import kill_tree, start_tocsin
from tocsin.testing.receiver import Receiver

pytestmark = [pytest.mark.spark, pytest.mark.slow]

KEYS, PER_KEY = 500, 20


def _first_successes(receiver: Receiver) -> dict[str, list[str]]:
    seen: set[str] = set()
    by_key: dict[str, list[str]] = {}
    for record in receiver.received(200):
        body = record.json()
        if body["schedule_id"] not in seen:
            seen.add(body["schedule_id"])
            by_key.setdefault(body["ordering_key"], []).append(body["schedule_id"])
    return by_key


@pytest.mark.parametrize("backend_url", ["postgres"], indirect=True)
def test_each_key_arrives_in_order_through_failures_and_a_crash(
        backend_url: str, receiver: Receiver, tmp_path: Path,
        say: Callable[[str], None]) -> None:
    store = open_store(backend_url, buckets=32)
    store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK, config={
        "url": receiver.url + "/in", "max_attempts": 100, "concurrency": 32}))
    receiver.reset(fail_rate=0.2, fail_status=503)
    rng = random.Random(11)
    now = time.time_ns() // 1_000_000
    items = [NewSchedule(channel="hook", payload=b'{"k": %d, "i": %d}' % (k, i),
                         due_ms=now + 15_000 + rng.randrange(20_000), ordering_key=f"key-{k}")
             for i in range(PER_KEY) for k in range(KEYS)]
    made = store.create(items, now_ms=now)
    expected: dict[str, list[str]] = {}
    in_order = sorted(range(len(made)), key=lambda seq: (made[seq][0].due_ms, seq))
    for schedule, _ in (made[seq] for seq in in_order):
        expected.setdefault(str(schedule.ordering_key), []).append(schedule.id)
    env = {"TOCSIN_STORE": backend_url, "TOCSIN_CHECKPOINT": str(tmp_path / "ck"),
           "TOCSIN_BUCKETS": "32", "TOCSIN_SPARK_MASTER": "local[*]",
           "TOCSIN_TRIGGER_SECONDS": "0.5", "TOCSIN_LEASE_SECONDS": "20",
           "TOCSIN_RETRY_BASE_SECONDS": "0.2", "TOCSIN_RETRY_CAP_SECONDS": "1"}
    total = KEYS * PER_KEY
    first = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-1.log")
    try:
        wait_until(lambda: len(receiver.received(200)) > total // 3, timeout_s=300,
                   interval_s=1, what="a third delivered")
    finally:
        kill_tree(first)
    second = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-2.log")
    try:
        wait_until(lambda: sum(map(len, _first_successes(receiver).values())) == total,
                   timeout_s=600, interval_s=2, what="every schedule delivered")
    finally:
        kill_tree(second)
        store.close()
    got = _first_successes(receiver)
    assert got.keys() == expected.keys()
    out_of_order = [k for k in expected if got[k] != expected[k]]
    assert not out_of_order, f"{len(out_of_order)} keys out of order, e.g. {out_of_order[0]}"
    failures = len(receiver.received(503))
    say(f"{total} delivered in order; {failures} failed attempts retried")

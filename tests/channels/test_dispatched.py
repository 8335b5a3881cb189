"""The new channels (SQS standard and FIFO, Redis Streams, NATS) and the example plug-in,
end to end through the dispatcher (:class:`~tocsin.testing.LocalDispatcher`, the same delivery
path as Spark's tasks) against their real servers: every schedule arrives once, under its
delivery id, a key's schedules in order where the transport keeps order, and a killed server
is retried and resumed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.channels.harnesses import Harness, harness_for
from tocsin.domain import NewSchedule, PayloadKind
from tocsin.testing import LocalDispatcher, ManualClock, memory_store

KINDS = ["sqs", "sqs_fifo", "redis_streams", "nats", "example_lines"]
ORDERED = {"sqs_fifo", "redis_streams", "nats", "example_lines"}
"""Transports that keep the order of what one producer sends (a standard SQS queue does not)."""


@pytest.fixture(params=KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    """Each kind's harness over the run's server."""
    h = harness_for(request.param, request, tmp_path)
    h.variant = request.param  # type: ignore[attr-defined]
    return h


def schedule(store: object, channel: str, clock: ManualClock, n: int) -> list[str]:
    """``n`` schedules due now on ``channel``, keys ``k0``..``k2`` in turn; their ids."""
    made = store.create([  # type: ignore[attr-defined]
        NewSchedule(channel=channel, payload=b'{"n":%d}' % i, payload_kind=PayloadKind.JSON,
                    due_ms=clock.now_ms() + i, ordering_key=f"k{i % 3}")
        for i in range(n)], now_ms=clock.now_ms())
    return [s.id for s, _ in made]


def test_every_schedule_arrives_once_in_its_keys_order(harness: Harness) -> None:
    clock = ManualClock(1_900_000_000_000)
    store = memory_store()
    spec = harness.spec()
    store.put_channel(spec)
    ids = schedule(store, spec.name, clock, 30)
    clock.advance(100)
    local = LocalDispatcher(store, clock=clock)
    try:
        assert local.run_until_idle().delivered == 30
    finally:
        local.close()
        store.close()
    got = harness.received(spec)
    assert sorted(got) == sorted(f"{i}-1" for i in ids)  # once each, under its delivery id
    if harness.variant in ORDERED:  # type: ignore[attr-defined]
        for key in range(3):
            assert [g for g in got if g[:-2] in ids[key::3]] == [f"{i}-1" for i in ids[key::3]]


def test_a_killed_server_is_retried_and_resumed(harness: Harness) -> None:
    clock = ManualClock(1_900_000_000_000)
    store = memory_store()
    spec = harness.spec()
    store.put_channel(spec)
    ids = schedule(store, spec.name, clock, 9)
    clock.advance(100)
    local = LocalDispatcher(store, clock=clock)
    try:
        harness.down()
        try:
            tally = local.run_until_idle()
        finally:
            harness.up(spec)
        assert tally.delivered == 0 and tally.retried > 0
        for _ in range(20):  # the back-off passes; the retries find the server back
            clock.advance(60_000)
            local.run_until_idle()
            if all(store.get(i).status.value == "DELIVERED" for i in ids):
                break
    finally:
        local.close()
    assert [store.get(i).status.value for i in ids] == ["DELIVERED"] * 9
    store.close()
    got = harness.received(spec)
    assert sorted(g.rsplit("-", 1)[0] for g in got) == sorted(ids)  # each schedule once

"""Recurring schedules and throttling end to end: the expansion query and the dispatcher on a
real Spark session, the real API, and webhook consumers that release their tokens."""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import httpx
import pytest

from tests.support.consumer import ReleasingConsumer
from tocsin.abc import Store
from tocsin.api.views import iso
from tocsin.domain import (
    ChannelKind,
    ChannelSpec,
    CronTrigger,
    Recurring,
    Status,
    firing_schedule_id,
)
from tocsin.stores import open_store
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer
from tocsin.testing.dispatch import (
    read_lines,
    running_dispatcher,
    running_expander,
    wait_for_polls,
    wait_until,
)

pytestmark = pytest.mark.spark


def _now() -> int:
    return time.time_ns() // 1_000_000


def test_firings_are_expanded_and_delivered_once(spark, backend_url: str,  # type: ignore[no-untyped-def]
                                                 tmp_path: Path) -> None:
    """Every second for three seconds, two messages a firing: six deliveries with the
    firings' deterministic ids, and each firing accounted for."""
    store = open_store(backend_url, buckets=16)
    out = tmp_path / "out.jsonl"
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    first = (_now() // 1000 + 3) * 1000
    trigger = CronTrigger.parse("* * * * * *", "UTC", start_ms=first, end_ms=first + 2000)
    store.create_recurring(Recurring(id="rec-e2e", trigger=trigger, channel="out",
                                     payload=b'{"tick": true}', count=2), now_ms=_now())
    expected = {firing_schedule_id("rec-e2e", first + s * 1000, i)
                for s in range(3) for i in range(2)}
    with running_expander(spark, backend_url, tmp_path / "ck-x", buckets=16, partitions=2), \
            running_dispatcher(spark, backend_url, tmp_path / "ck", buckets=16, partitions=2,
                               idle_beat_ms=50):
        wait_until(lambda: len(read_lines(out)) >= 6, timeout_s=90, what="six deliveries")
        wait_for_polls(store)  # the dispatcher looked again: nothing left to claim
    assert store.counts()[Status.DELIVERED] == 6
    assert store.counts()[Status.PENDING] + store.counts()[Status.CLAIMED] == 0
    lines = read_lines(out)
    assert sorted(line["schedule_id"] for line in lines) == sorted(expected)
    assert all(line["headers"]["Tocsin-Recurring-Id"] == "rec-e2e" for line in lines)
    records = store.recurring_firings("rec-e2e")
    assert [(r.firing_ms, r.outcome, r.messages) for r in records] == [
        (first + s * 1000, "expanded", {"DELIVERED": 2}) for s in range(3)]
    store.close()


@pytest.fixture
def throttled(tmp_path: Path) -> Iterator[tuple[Store, ApiServer, httpx.Client]]:
    store = SQLiteStore(tmp_path / "tocsin.db", buckets=16)
    server = ApiServer(store).start()
    with httpx.Client(base_url=server.url, timeout=30, headers=server.headers) as api:
        yield store, server, api
    server.stop()
    store.close()


def _fan_out(api: httpx.Client, consumer: ReleasingConsumer, *, count: int,
             policy: dict[str, object]) -> tuple[str, int]:
    """A webhook channel to ``consumer``, the policy, and one firing of ``count`` messages
    three seconds from now; returns (recurring id, firing instant)."""
    assert api.post("/v1/channels", json={"name": "hook", "kind": "webhook", "config": {
        "url": consumer.url, "concurrency": 16}}).status_code == 201
    assert api.post("/v1/policies", json=policy).status_code == 201
    firing = (_now() // 1000 + 3) * 1000
    r = api.post("/v1/recurring", json={
        "cron": "* * * * * *", "channel": "hook", "payload": {"job": "report"}, "count": count,
        "policy": policy["name"], "start": iso(firing), "end": iso(firing)})
    assert r.status_code == 201, r.text
    return r.json()["id"], firing


@pytest.mark.slow
def test_a_batch_of_5000_never_has_more_than_50_in_flight(spark, throttled,  # type: ignore[no-untyped-def]
                                                         tmp_path: Path, say) -> None:
    store, server, api = throttled
    consumer = ReleasingConsumer(server.url, release_after_s=0.02,
                                 headers=server.headers).start()
    try:
        rid, firing = _fan_out(api, consumer, count=5000,
                               policy={"name": "batch", "max_in_flight": 50})
        url = f"sqlite:///{tmp_path / 'tocsin.db'}"
        with running_expander(spark, url, tmp_path / "ck-x", buckets=16, partitions=2), \
                running_dispatcher(spark, url, tmp_path / "ck", buckets=16, partitions=2,
                                   trigger_seconds=0.1):
            wait_until(lambda: len(consumer.schedule_ids()) >= 5000, timeout_s=400,
                       interval_s=1, what="5000 deliveries")
            wait_until(lambda: consumer.released >= len(consumer.arrivals), timeout_s=30,
                       what="every token released")
    finally:
        consumer.stop()
    assert consumer.schedule_ids() == {firing_schedule_id(rid, firing, i) for i in range(5000)}
    assert consumer.max_held <= 50, consumer.max_held
    assert consumer.release_errors == []
    assert store.in_flight("batch", tenant="default", now_ms=_now()) == 0
    say(f"5000 delivered; at most {consumer.max_held} held at once (policy: 50); "
          f"{len(consumer.arrivals) - 5000} repeats")


def test_tokens_never_released_come_back_after_the_lease(spark, throttled,  # type: ignore[no-untyped-def]
                                                         tmp_path: Path) -> None:
    _, server, api = throttled
    consumer = ReleasingConsumer(server.url, release_after_s=None,
                                 headers=server.headers).start()
    db = tmp_path / "tocsin.db"

    def claimed() -> list[int]:  # when each was claimed, i.e. took its token
        with closing(sqlite3.connect(db)) as conn:
            return sorted(r[0] for r in conn.execute(
                "SELECT claimed_ms FROM schedules WHERE policy = 'slow' "
                "AND status = 'DELIVERED'"))

    try:
        _fan_out(api, consumer, count=6,
                 policy={"name": "slow", "max_in_flight": 2, "token_lease": 2})
        with running_expander(spark, f"sqlite:///{db}", tmp_path / "ck-x", buckets=16,
                              partitions=2), \
                running_dispatcher(spark, f"sqlite:///{db}", tmp_path / "ck", buckets=16,
                                   partitions=2, trigger_seconds=0.2):
            wait_until(lambda: len(consumer.schedule_ids()) >= 6 and len(claimed()) >= 6,
                       timeout_s=120, what="six deliveries, two per lease, acknowledged")
    finally:
        consumer.stop()
    assert len(consumer.arrivals) == 6
    # Two tokens: the third delivery is claimed only when a lease (2 s, from its claim) has
    # run out, and so on. Judged by the claim times the store keeps, not by arrivals: on a
    # busy machine a delivery can arrive a second after its claim, and the next pair, claimed
    # on time, then seems early.
    at = claimed()
    assert all(at[i + 2] - at[i] >= 2_000 for i in range(4)), at

"""Liveness, readiness (store and dispatcher heartbeat), Prometheus metrics and OpenAPI."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tocsin.abc import Store
from tocsin.clock import ManualClock
from tocsin.config import Settings
from tocsin.dispatcher.beat import DISPATCHER, SOURCE, batch_counts, beat_info
from tocsin.dispatcher.deliver import Tally
from tocsin.dispatcher.runs import RUN_STALE_MS
from tocsin.domain import Ack, Outcome, Status
from tocsin.errors import StoreError
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer


def test_healthz_and_readyz(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    r = api.get("/readyz")
    assert r.status_code == 200 and r.json() == {"status": "ready", "problems": []}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(start_ms=1_900_000_000_000)


@pytest.fixture
def watched(api_store: Store, clock: ManualClock) -> Iterator[str]:
    """The URL of ``/readyz`` on a server that expects a dispatcher (trigger 1 s: 10 s window)."""
    server = ApiServer(api_store, Settings(trigger_seconds=1), clock=clock,
                       expect_dispatcher=True).start()
    yield f"{server.url}/readyz"
    server.stop()


def test_readyz_wants_a_recent_dispatcher_beat(watched: str, api_store: Store,
                                               clock: ManualClock) -> None:
    api_store.beat(DISPATCHER, now_ms=clock.now_ms() - 60_000)
    api_store.beat(SOURCE, now_ms=clock.now_ms() - 60_000)
    stale = httpx.get(watched)
    assert stale.status_code == 503 and stale.json()["status"] == "unready"
    assert stale.json()["problems"] == [
        "dispatcher: no heartbeat for 60.0 s (expected within 10 s)"]
    api_store.beat(SOURCE, now_ms=clock.now_ms())  # the idle beat counts too
    assert httpx.get(watched).status_code == 200
    clock.advance(10_000)
    assert httpx.get(watched).status_code == 200
    clock.advance(1_000)
    assert httpx.get(watched).status_code == 503


def test_the_window_is_five_triggers_when_longer(api_store: Store, clock: ManualClock) -> None:
    server = ApiServer(api_store, Settings(trigger_seconds=4), clock=clock,
                       expect_dispatcher=True).start()
    try:
        api_store.beat(DISPATCHER, now_ms=clock.now_ms())
        clock.advance(19_000)
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        clock.advance(2_000)
        assert "within 20 s" in httpx.get(f"{server.url}/readyz").json()["problems"][0]
    finally:
        server.stop()


def test_readyz_waits_for_the_newest_runs_first_batch(watched: str, api_store: Store,
                                                      clock: ManualClock) -> None:
    now = clock.now_ms()
    api_store.beat_run("old", now_ms=now - 5_000, ready=True)
    api_store.beat(DISPATCHER, now_ms=now - 1_000)  # the old run's beats are still fresh
    assert httpx.get(watched).status_code == 200
    clock.advance(1)
    api_store.beat_run("new", now_ms=clock.now_ms())  # a restart: a new run, not yet warm
    starting = httpx.get(watched)
    assert starting.status_code == 503
    assert starting.json()["problems"] == [
        "dispatcher: run new is starting (its first batch has not run)"]
    api_store.beat_run("new", now_ms=clock.now_ms(), ready=True)
    assert httpx.get(watched).status_code == 200
    clock.advance(RUN_STALE_MS + 1)
    api_store.beat(DISPATCHER, now_ms=clock.now_ms())
    stopped = httpx.get(watched)  # batch beats alone do not make a run whose beat stopped live
    assert stopped.status_code == 503 and "run new has not beaten" in stopped.json()["problems"][0]


class _DownStore(SQLiteStore):
    """A store that cannot be reached."""

    def ping(self) -> None:
        raise StoreError("connection refused: postgresql://tocsin:pw-9@db.internal:5432/t")

    def get(self, schedule_id: str, *, tenant: str | None = None) -> Any:
        raise StoreError("connection refused: postgresql://tocsin:pw-9@db.internal:5432/t")


def test_an_unreachable_store_is_503(tmp_path: Path) -> None:
    never = ApiServer(SQLiteStore(tmp_path / "never.db", buckets=4),
                      expect_dispatcher=True).start()
    down = ApiServer(_DownStore(tmp_path / "down.db", buckets=4)).start()
    try:
        r = httpx.get(f"{never.url}/readyz")
        assert r.status_code == 503 and "no heartbeat yet" in r.json()["problems"][0]
        r = httpx.get(f"{down.url}/readyz")
        assert r.status_code == 503 and r.json()["problems"] == [
            "store: the store does not answer (the server's log says why)"]
        assert "db.internal" not in r.text and "pw-9" not in r.text  # open without a key
        r = httpx.get(f"{down.url}/v1/schedules/x", headers=down.headers)
        assert r.status_code == 503 and r.json()["error"]["type"] == "StoreError"
    finally:
        never.stop()
        down.stop()


def _scrape(api: httpx.Client) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    r = api.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    samples: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            samples.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return samples


def test_metrics_from_the_store(api: httpx.Client, api_store: Store) -> None:
    before = _scrape(api)["tocsin_schedules"][(("status", "PENDING"),)]
    api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 600})
    api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 0})
    samples = _scrape(api)
    assert samples["tocsin_schedules"][(("status", "PENDING"),)] == before + 2
    assert set(dict(k)["status"] for k in samples["tocsin_schedules"]) == {
        "PENDING", "CLAIMED", "DELIVERED", "CANCELLED", "DEAD", "EXPIRED"}
    assert samples["tocsin_due_backlog"][()] >= 1


def test_counters_add_up_from_acknowledgements(api: httpx.Client, api_store: Store) -> None:
    """Counters are the store's sums: each acknowledgement adds in its own transaction."""
    before = _scrape(api)
    now = 1_900_000_000_000

    def acks(tenant: str, channel: str, *late_and_status: tuple[int, Status]) -> list[Ack]:
        return [Ack(schedule_id=f"x{i}", delivery_id=f"x{i}-1", attempt=1,
                    outcome=Outcome.DELIVERED, error=None, started_ms=now, ended_ms=now + late,
                    due_ms=now, status=status, tenant=tenant, channel=channel)
                for i, (late, status) in enumerate(late_and_status)]

    # none of these rows exist: every ack is fenced, and still counted as an attempt
    api_store.acknowledge(epoch=1, now_ms=now, acks=acks(
        "m", "c1", (20, Status.DELIVERED), (700, Status.DELIVERED), (0, Status.PENDING)))
    api_store.acknowledge(epoch=2, now_ms=now, acks=acks(
        "m", "c1", (40_000, Status.DELIVERED), (0, Status.DEAD)))
    api_store.add_counts(batch_counts(300))
    api_store.beat(DISPATCHER, now_ms=now, info=beat_info(batch_id=1, batch_ms=500,
                                                          tally=Tally(delivered=1)))
    samples = _scrape(api)
    deliveries = {dict(k)["outcome"]: v for k, v in samples["tocsin_deliveries_total"].items()
                  if dict(k)["tenant"] == "m"}
    assert deliveries == {"delivered": 3, "retried": 1, "dead": 1}
    mine = (("channel", "c1"), ("tenant", "m"))
    buckets = {dict(k)["le"]: v for k, v in samples["tocsin_lateness_seconds_bucket"].items()
               if dict(k)["tenant"] == "m"}
    assert (buckets["0.05"], buckets["1.0"], buckets["60.0"], buckets["+Inf"]) == (1, 2, 3, 3)
    assert samples["tocsin_lateness_seconds_count"][mine] == 3
    assert samples["tocsin_lateness_seconds_sum"][mine] == pytest.approx(40.72)
    assert samples["tocsin_fenced_total"][()] == before["tocsin_fenced_total"][()] + 5
    assert samples["tocsin_batch_duration_seconds_count"][()] == (
        before["tocsin_batch_duration_seconds_count"][()] + 1)
    assert samples["tocsin_dispatcher_last_batch_seconds"][()] == 0.5
    assert samples["tocsin_dispatcher_last_batch_timestamp_seconds"][()] == 1_900_000_000.0


def test_gauges_due_soon_tokens_paused(api: httpx.Client, api_store: Store) -> None:
    api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 120})
    api.post("/v1/policies", json={"name": "gauge-pol", "max_in_flight": 5})
    samples = _scrape(api)
    assert samples["tocsin_due_soon"][(("within", "5m"),)] >= 1
    assert samples["tocsin_due_soon"][(("within", "1h"),)] >= samples["tocsin_due_soon"][
        (("within", "5m"),)]
    assert "tocsin_paused_channels" in samples and "tocsin_halted_keys" in samples


def test_an_old_beat_does_not_break_the_scrape(api: httpx.Client, api_store: Store) -> None:
    api_store.beat(DISPATCHER, now_ms=1_900_000_002_000, info={"v": 1, "batch_ms": 3})
    samples = _scrape(api)
    assert "tocsin_schedules" in samples
    assert "tocsin_dispatcher_last_batch_seconds" not in samples


def test_openapi_describes_every_body(api: httpx.Client) -> None:
    assert api.get("/docs").status_code == 200
    doc = api.get("/openapi.json").json()
    schemas = doc["components"]["schemas"]

    def refs(node: object) -> Iterator[str]:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == "$ref":
                    yield value
                else:
                    yield from refs(value)
        elif isinstance(node, list):
            for value in node:
                yield from refs(value)

    missing = {r for r in refs(doc) if r.removeprefix("#/components/schemas/") not in schemas}
    assert not missing
    body = doc["paths"]["/v1/schedules"]["post"]["requestBody"]["content"]["application/json"]
    assert {"channel", "delay", "due_at"} <= set(schemas["ScheduleIn"]["properties"])
    assert len(body["schema"]["oneOf"]) == 2


def test_held_destinations_and_in_flight_show_in_metrics_and_status(
        api: httpx.Client, api_store: Store) -> None:
    from tocsin.abc import ChannelHold
    from tocsin.domain import NewSchedule

    now = 1_900_000_000_000
    api_store.create([NewSchedule(channel="out", payload=b"{}", due_ms=now) for _ in range(3)],
                     now_ms=now)
    api_store.claim(epoch=api_store.next_epoch(), bucket_lo=0, bucket_hi=15, until_ms=now + 1,
                    now_ms=now, lease_ms=60_000, limit=2)
    api_store.hold_channel(ChannelHold("default", "out", "open", 1_000, 2**40, 5, "timeout"))
    try:
        samples = _scrape(api)
        held = (("channel", "out"), ("reason", "open"), ("tenant", "default"))
        assert samples["tocsin_channel_held"][held] == 1
        assert samples["tocsin_in_flight"][(("channel", "out"), ("tenant", "default"))] == 2
        status = api.get("/v1/status").json()
        [hold] = status["held_channels"]
        assert (hold["name"], hold["reason"], hold["failures"], hold["last_error"]) == (
            "out", "open", 5, "timeout")
        assert status["in_flight"] == 2
    finally:
        api_store.unhold_channel("default", "out")
    assert "tocsin_channel_held" not in _scrape(api) or not _scrape(api)["tocsin_channel_held"]

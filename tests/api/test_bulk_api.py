"""Bulk cancel and reschedule by predicate, and ``GET /v1/stats``, over real HTTP on both
stores: the Python client, the tenant scope, bad input."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.support.tenants import A, B, Tenants, two_tenants
from tocsin.abc import Store
from tocsin.client import Client
from tocsin.domain import Ack, Outcome, Status
from tocsin.errors import ValidationError
from tocsin.testing.api_server import ApiServer


@pytest.fixture(scope="module")
def client(api_server: ApiServer) -> Iterator[Client]:
    with Client(api_server.url, api_key=api_server.admin_key) as c:
        yield c


@pytest.fixture(scope="module")
def tenants(api_server: ApiServer, api_store: Store,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    yield from two_tenants(api_store, api_server.url, api_server.admin_key,
                           tmp_path_factory.mktemp("bulk"))


def test_cancel_by_key_prefix(client: Client, api_store: Store) -> None:
    made = [client.schedule("out", {"n": i}, delay=600, key=f"campaign-7/{i}")["id"]
            for i in range(5)]
    kept = client.schedule("out", {"n": 9}, delay=600, key="campaign-8/0")["id"]
    got = client.cancel_where(key_prefix="campaign-7/", limit=3)
    assert got == {"matched": 3, "cancelled": 3, "too_late": 0, "more": True}
    got = client.cancel_where(key_prefix="campaign-7/")
    assert got == {"matched": 2, "cancelled": 2, "too_late": 0, "more": False}
    assert {api_store.get(i).status for i in made} == {Status.CANCELLED}
    assert api_store.get(kept).status is Status.PENDING


def test_a_firing_schedule_is_too_late(client: Client, api_store: Store) -> None:
    sid = client.schedule("out", {"n": 1}, delay=0, ordering_key="firing-1")["id"]
    bucket = api_store.get(sid).bucket
    now = time.time_ns() // 1_000_000
    api_store.claim(epoch=api_store.next_epoch(), bucket_lo=bucket, bucket_hi=bucket,
                    until_ms=now, now_ms=now, lease_ms=600_000, limit=10_000)
    assert client.cancel_where(ordering_key="firing-1") == {
        "matched": 1, "cancelled": 0, "too_late": 1, "more": False}
    assert api_store.get(sid).status is Status.CLAIMED


def test_reschedule_by_shift_and_to_a_time(client: Client, api_store: Store) -> None:
    made = [client.schedule("out", {"n": i}, delay=600, ordering_key="move-1")["id"]
            for i in range(3)]
    before = {i: api_store.get(i).due_ms for i in made}
    got = client.reschedule_where(ordering_key="move-1", shift="-PT5M")
    assert got == {"matched": 3, "rescheduled": 3, "too_late": 0, "more": False}
    assert {i: api_store.get(i).due_ms for i in made} == {i: d - 300_000
                                                          for i, d in before.items()}
    at = datetime.now(UTC).replace(microsecond=0) + timedelta(days=1)
    client.reschedule_where(ordering_key="move-1", due_at=at)
    assert {api_store.get(i).due_ms for i in made} == {int(at.timestamp() * 1000)}


def test_bad_input_names_the_field(api: httpx.Client) -> None:
    for path, body, field in (
            ("cancel", {}, "selection"),
            ("cancel", {"tenant": "default"}, "selection"),
            ("cancel", {"channel": "out", "limit": 0}, "limit"),
            ("cancel", {"channel": "out", "limit": 100_001}, "limit"),
            ("cancel", {"channel": "out", "status": "DEAD"}, "status"),
            ("cancel", {"due_from": "2030-01-01T00:00:00"}, "due_from"),
            ("cancel", {"key_prefix": ""}, "key_prefix"),
            ("reschedule", {"channel": "out"}, "due_at"),
            ("reschedule", {"channel": "out", "shift": 60, "delay": 5}, "due_at"),
            ("reschedule", {"channel": "out", "shift": "soon"}, "shift"),
            ("reschedule", {"channel": "out", "due_at": "2001-01-01T00:00:00Z"}, "due_at")):
        r = api.post(f"/v1/schedules/{path}", json=body)
        assert r.status_code == 422, (body, r.text)
        assert r.json()["error"]["field"] == field, (body, r.text)


def test_the_client_refuses_a_naive_time(client: Client) -> None:
    with pytest.raises(ValidationError):
        client.cancel_where(due_from=datetime(2030, 1, 1))  # noqa: DTZ001


def test_a_tenant_key_changes_only_its_own(tenants: Tenants, api_store: Store) -> None:
    mine = [tenants.schedule(key=f"t-camp/{i}")["id"] for i in range(2)]
    r = tenants.b.post("/v1/schedules", json={"channel": "out", "payload": {"of": B},
                                              "delay": 3600, "key": "t-camp/0"})
    theirs = r.json()["id"]
    r = tenants.a.post("/v1/schedules/cancel", json={"key_prefix": "t-camp/"})
    assert r.status_code == 200 and r.json()["cancelled"] == 2, r.text
    assert {api_store.get(i).status for i in mine} == {Status.CANCELLED}
    assert api_store.get(theirs).status is Status.PENDING
    r = tenants.a.post("/v1/schedules/cancel", json={"key_prefix": "t-camp/", "tenant": B})
    assert r.status_code == 403 and r.json()["error"]["field"] == "tenant"
    r = tenants.a.post("/v1/schedules/reschedule", json={"key_prefix": "t-camp/",
                                                         "tenant": B, "shift": 60})
    assert r.status_code == 403
    assert tenants.a_ro.post("/v1/schedules/cancel", json={"key_prefix": "t-"}).status_code \
        == 403
    assert api_store.get(theirs).status is Status.PENDING
    r = tenants.admin.post("/v1/schedules/cancel", json={"key_prefix": "t-camp/", "tenant": B})
    assert r.json()["cancelled"] == 1
    assert api_store.get(theirs).status is Status.CANCELLED


def test_stats(tenants: Tenants, api_store: Store) -> None:
    channel = tenants.channel()
    for _ in range(3):
        tenants.schedule(channel=channel)  # due in an hour
    tenants.schedule(channel=channel, delay=3 * 3600)
    cancel = tenants.schedule(channel=channel)["id"]
    tenants.a.delete(f"/v1/schedules/{cancel}")
    for late in (100, 300):
        row = tenants.claimed(channel=channel)
        now = time.time_ns() // 1_000_000
        api_store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
            schedule_id=row.id, delivery_id=f"{row.id}-1", attempt=1,
            outcome=Outcome.DELIVERED, error=None, started_ms=now, ended_ms=now,
            due_ms=now - late, status=Status.DELIVERED)])
    r = tenants.a.get("/v1/stats", params={"window": "PT10M", "ahead": "PT2H"})
    assert r.status_code == 200, r.text
    [mine] = [c for c in r.json()["channels"] if c["channel"] == channel]
    assert mine == {"tenant": A, "channel": channel, "pending": 4, "due_soon": 3,
                    "delivered": 2, "dead": 0, "cancelled": 1, "retried": 0, "expired": 0,
                    "lateness_ms": {"p50": 100, "p95": 300, "p99": 300, "max": 300}}
    assert {c["tenant"] for c in r.json()["channels"]} == {A}
    others = tenants.b.get("/v1/stats").json()["channels"]
    assert channel not in {c["channel"] for c in others}
    every = tenants.admin.get("/v1/stats").json()["channels"]
    assert (A, channel) in {(c["tenant"], c["channel"]) for c in every}
    for params, field in (({"window": "P30D"}, "window"), ({"ahead": "soon"}, "ahead")):
        r = tenants.a.get("/v1/stats", params=params)
        assert r.status_code == 422 and r.json()["error"]["field"] == field

"""Per-tenant caps: pending schedules and creates a second, answered 429 with Retry-After."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.clock import ManualClock
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Role, Status
from tocsin.quotas import CreateRate, Quotas
from tocsin.testing.api_server import ApiServer


def test_the_bucket_lends_a_batch_then_makes_the_tenant_wait() -> None:
    rate = CreateRate(2)
    assert rate.take("a", 1, now_ms=0) == 0
    assert rate.take("a", 5, now_ms=0) == 0, "a batch over a second's worth passes once"
    assert rate.take("a", 1, now_ms=0) == 2, "then the debt (4 tokens at 2/s) is paid first"
    assert rate.take("b", 1, now_ms=0) == 0, "another tenant has its own bucket"
    assert rate.take("a", 1, now_ms=1_000) == 1
    assert rate.take("a", 1, now_ms=2_000) == 1, "an empty bucket admits nothing"
    assert rate.take("a", 1, now_ms=2_250) == 0
    assert rate.take("a", 1, now_ms=100_000) == 0
    assert rate.take("a", 2, now_ms=100_000) == 0, "refilled to one second's worth, no more"
    assert rate.take("a", 1, now_ms=100_000) == 1


_RUNS = itertools.count()
Capped = tuple[httpx.Client, httpx.Client, ManualClock, str]


@pytest.fixture
def capped(api_store: Store, tmp_path: Path) -> Iterator[Capped]:
    """A server capping each tenant at 3 pending schedules and 2 creates a second, with keys
    of two fresh tenants."""
    clock = ManualClock()
    run = next(_RUNS)
    settings = Settings(tenant_max_pending=3, tenant_creates_per_second=2)
    server = ApiServer(api_store, settings, clock=clock).start()
    clients = []
    for tenant in (f"capped-{run}", f"roomy-{run}"):
        api_store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, tenant=tenant,
                                          config={"path": str(tmp_path / f"{tenant}.jsonl")}))
        _, token = issue_key(api_store, role=Role.TENANT, tenant=tenant, now_ms=0)
        clients.append(httpx.Client(base_url=server.url, timeout=30,
                                    headers={"authorization": f"Bearer {token}"}))
    yield clients[0], clients[1], clock, f"capped-{run}"
    for client in clients:
        client.close()
    server.stop()


def _one(n: int) -> dict[str, object]:
    return {"channel": "out", "payload": {"n": n}, "delay": 3600}


def test_creates_a_second_answer_429_with_retry_after(capped: Capped, api_store: Store) -> None:
    api, other, clock, tenant = capped
    assert api.post("/v1/schedules", json=_one(1)).status_code == 201
    assert api.post("/v1/schedules", json=_one(2)).status_code == 201
    refused = api.post("/v1/schedules", json=_one(3))
    assert refused.status_code == 429 and refused.headers["retry-after"] == "1"
    error = refused.json()["error"]
    assert error["type"] == "QuotaExceededError" and "2 schedules a second" in error["message"]
    assert other.post("/v1/schedules", json=_one(1)).status_code == 201, "per tenant"
    assert api_store.pending_count(tenant=tenant) == 2, "the refused one was not stored"
    clock.advance(1_000)
    assert api.post("/v1/schedules", json=_one(3)).status_code == 201


def test_pending_schedules_are_capped(capped: Capped) -> None:
    api, _, clock, _ = capped
    made = []
    for n in range(3):
        clock.advance(1_000)
        r = api.post("/v1/schedules", json=_one(n))
        assert r.status_code == 201, r.text
        made.append(r.json()["id"])
    clock.advance(1_000)
    refused = api.post("/v1/schedules", json=_one(4))
    assert refused.status_code == 429 and int(refused.headers["retry-after"]) > 0
    assert "holds 3 pending schedules and the cap is 3" in refused.json()["error"]["message"]
    assert api.delete(f"/v1/schedules/{made[0]}").json()["status"] == Status.CANCELLED.value
    clock.advance(10_000)
    never = api.post("/v1/schedules", json={"schedules": [_one(n) for n in range(4)]})
    assert never.status_code == 422 and never.json()["error"]["field"] == "schedules"
    assert "over its pending cap of 3" in never.json()["error"]["reason"]
    assert api.post("/v1/schedules", json=_one(4)).status_code == 201, "room again"


def test_no_caps_by_default() -> None:
    settings = Settings()
    assert settings.tenant_max_pending == 0 and settings.tenant_creates_per_second == 0
    assert not Quotas.of(settings).active
    assert Quotas(max_pending=1).active and Quotas(creates_per_second=0.5).active

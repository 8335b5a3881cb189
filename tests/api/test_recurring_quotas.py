"""Per-tenant caps cover recurring rules (security review, round two), on both stores: with a
pending cap of 5, a rule of count 100 000 was accepted; now one firing over the pending cap is a
422, and the rules a tenant holds and the messages a minute its active rules make together are
capped (429), on create, on PATCH and on resume. Other tenants are not counted."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest

from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Role
from tocsin.testing.api_server import ApiServer

_RUNS = itertools.count()
Pair = tuple[httpx.Client, httpx.Client]


@contextmanager
def _pair(api_store: Store, settings: Settings) -> Iterator[Pair]:
    """Two fresh tenants of a server with ``settings``."""
    server = ApiServer(api_store, settings).start()
    run, clients = next(_RUNS), []
    for name in ("ruled", "other"):
        tenant = f"{name}-{run}"
        api_store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant=tenant))
        _, token = issue_key(api_store, role=Role.TENANT, tenant=tenant, now_ms=0)
        clients.append(httpx.Client(base_url=server.url, timeout=30,
                                    headers={"authorization": f"Bearer {token}"}))
    try:
        yield clients[0], clients[1]
    finally:
        for client in clients:
            client.close()
        server.stop()


@pytest.fixture
def tenants(api_store: Store) -> Iterator[Pair]:
    """Two fresh tenants of a server capping each at 5 pending schedules and 3 rules."""
    with _pair(api_store, Settings(tenant_max_pending=5, tenant_max_recurring=3)) as pair:
        yield pair


def _rule(cron: str = "0 9 * * *", count: int = 1, **more: object) -> dict[str, object]:
    return {"cron": cron, "channel": "out", "payload": 1, "count": count, **more}


@pytest.mark.parametrize("count", [6, 100, 100_000])
def test_one_firing_over_the_pending_cap_is_refused(tenants: Pair, count: int) -> None:
    api, _ = tenants
    for _ in range(3):
        r = api.post("/v1/recurring", json=_rule(count=count))
        assert r.status_code == 422 and r.json()["error"]["field"] == "count", r.text
    assert api.get("/v1/recurring").json()["items"] == []
    made = api.post("/v1/recurring", json=_rule(count=5)).json()["id"]
    r = api.patch(f"/v1/recurring/{made}", json={"count": count})
    assert r.status_code == 422 and r.json()["error"]["field"] == "count"


def test_the_rules_a_tenant_holds_are_capped(tenants: Pair) -> None:
    api, other = tenants
    made = [api.post("/v1/recurring", json=_rule()) for _ in range(3)]
    assert [r.status_code for r in made] == [201, 201, 201]
    for _ in range(2):
        refused = api.post("/v1/recurring", json=_rule())
        assert refused.status_code == 429 and "3 recurring rules" in refused.text
        assert refused.headers["retry-after"] == "60"
    assert len(api.get("/v1/recurring").json()["items"]) == 3
    assert other.post("/v1/recurring", json=_rule()).status_code == 201, "per tenant"
    assert api.patch(f"/v1/recurring/{made[0].json()['id']}",
                     json={"count": 2}).status_code == 200, "a change is not one more rule"
    assert api.delete(f"/v1/recurring/{made[0].json()['id']}").status_code == 204
    assert api.post("/v1/recurring", json=_rule()).status_code == 201


def test_the_messages_a_minute_of_a_tenants_rules_are_capped(api_store: Store) -> None:
    """count x firings a minute, summed over the tenant's active rules: at most 100."""
    with _pair(api_store, Settings(tenant_max_pending=5, tenant_recurring_per_minute=100)) as (
            api, other):
        every_10s = _rule("*/10 * * * * *", 5)  # 6 firings x 5 = 30 a minute
        made = [api.post("/v1/recurring", json=every_10s).json()["id"] for _ in range(3)]
        refused = api.post("/v1/recurring", json=every_10s)
        assert refused.status_code == 429 and "messages a minute" in refused.text
        assert api.post("/v1/recurring", json=_rule("* * * * *", 5)).status_code == 201
        last = api.post("/v1/recurring", json=_rule("* * * * *", 5))
        assert last.status_code == 201, "exactly at the cap"
        assert api.post("/v1/recurring", json=_rule("* * * * *", 1)).status_code == 429
        assert api.patch(f"/v1/recurring/{last.json()['id']}",
                         json={"cron": "*/10 * * * * *"}).status_code == 429
        assert other.post("/v1/recurring", json=every_10s).status_code == 201, "per tenant"
        assert api.post(f"/v1/recurring/{made[0]}/pause").status_code == 200
        assert api.post("/v1/recurring", json=every_10s).status_code == 201, "room of the paused"
        assert api.post(f"/v1/recurring/{made[0]}/resume").status_code == 429
        assert api.get(f"/v1/recurring/{made[0]}").json()["paused"] is True
        assert api.post("/v1/recurring", json=_rule(paused=True)).status_code == 201
        assert len(api.get("/v1/recurring").json()["items"]) == 7

"""The two-tenant route matrix: EVERY route of the OpenAPI document, called about tenant A's
objects with A's key, B's key, A's read-only key, a forged key and no key, on both stores.

Each route says what kind of route it is (:class:`Kind`) and how to make a fresh object of A's
for it. A route of the document missing from :data:`ROUTES` fails the test, so a new route
cannot ship without saying how it keeps tenants apart.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import httpx
import pytest

from tests.support.tenants import A, Tenants, two_tenants
from tocsin.abc import Store
from tocsin.testing.api_server import ApiServer


class Kind(Enum):
    """How a route keeps tenants apart, and so what B's key gets."""

    OWN = "own"
    """It addresses one of A's objects (by id or by name): B gets 404, like a missing one."""
    LIST = "list"
    """It lists: B gets 200 without A's object in it."""
    CREATE = "create"
    """It creates in a tenant: B naming tenant A gets 403 on the field ``tenant``."""
    ADMIN = "admin"
    """Admin keys only: A and B get 403."""
    OPEN = "open"
    """Health and metrics: anyone (by default)."""


@dataclass(frozen=True)
class Call:
    """One request about A's objects; ``witness`` is a path A reads before and after B's
    attempts (it must not change); ``seen`` is what a listing shows A and hides from B."""

    kind: Kind
    path: str
    body: Any = None
    witness: str | None = None
    seen: str | None = None
    params: dict[str, str] = field(default_factory=dict)


def _schedule(t: Tenants, suffix: str = "", body: Any = None) -> Call:
    sid = t.schedule()["id"]
    return Call(Kind.OWN, f"/v1/schedules/{sid}{suffix}", body, witness=f"/v1/schedules/{sid}")


def _recurring(t: Tenants, suffix: str = "", body: Any = None) -> Call:
    rid = t.recurring()
    return Call(Kind.OWN, f"/v1/recurring/{rid}{suffix}", body, witness=f"/v1/recurring/{rid}")


def _by_predicate(t: Tenants, verb: str, change: dict[str, Any]) -> Call:
    """A change by predicate over a fresh key prefix of A's: B naming tenant A is refused."""
    prefix = t.fresh("prefix") + "/"
    sid = t.schedule(key=f"{prefix}1")["id"]
    return Call(Kind.CREATE, f"/v1/schedules/{verb}", {"key_prefix": prefix, "tenant": A,
                                                        **change},
                witness=f"/v1/schedules/{sid}")


def _stats(t: Tenants) -> Call:
    """Live figures: A's fresh channel with a waiting schedule shows for A only."""
    channel = t.channel()
    t.schedule(channel=channel)
    return Call(Kind.LIST, "/v1/stats", seen=f'"{channel}"')


def _named(noun: str, make: Callable[[Tenants], str]) -> Callable[[Tenants], Call]:
    def call(t: Tenants) -> Call:
        path = f"/v1/{noun}/{make(t)}"
        return Call(Kind.OWN, path, witness=path)
    return call


ROUTES: dict[tuple[str, str], Callable[[Tenants], Call]] = {
    ("POST", "/v1/schedules"): lambda t: Call(
        Kind.CREATE, "/v1/schedules", {"channel": "out", "payload": 1, "delay": 60,
                                       "tenant": A}, witness="/v1/schedules?limit=1000"),
    ("GET", "/v1/schedules"): lambda t: Call(Kind.LIST, "/v1/schedules",
                                             seen=t.schedule()["id"], params={"limit": "1000"}),
    ("GET", "/v1/schedules/{schedule_id}"): _schedule,
    ("PATCH", "/v1/schedules/{schedule_id}"): lambda t: _schedule(t, body={"delay": 7200}),
    ("DELETE", "/v1/schedules/{schedule_id}"): _schedule,
    ("GET", "/v1/schedules/{schedule_id}/deliveries"): lambda t: _schedule(t, "/deliveries"),
    ("POST", "/v1/recurring"): lambda t: Call(
        Kind.CREATE, "/v1/recurring", {"cron": "0 9 * * *", "channel": "out", "payload": 1,
                                       "tenant": A}, witness="/v1/recurring?limit=1000"),
    ("GET", "/v1/recurring"): lambda t: Call(Kind.LIST, "/v1/recurring", seen=t.recurring(),
                                             params={"limit": "1000"}),
    ("GET", "/v1/recurring/{recurring_id}"): _recurring,
    ("PATCH", "/v1/recurring/{recurring_id}"): lambda t: _recurring(t, body={"count": 2}),
    ("DELETE", "/v1/recurring/{recurring_id}"): _recurring,
    ("POST", "/v1/recurring/{recurring_id}/pause"): lambda t: _recurring(t, "/pause"),
    ("POST", "/v1/recurring/{recurring_id}/resume"): lambda t: _recurring(t, "/resume"),
    ("POST", "/v1/recurring/{recurring_id}/trigger"): lambda t: _recurring(t, "/trigger"),
    ("POST", "/v1/recurring/{recurring_id}/backfill"): lambda t: _recurring(
        t, "/backfill", body={"from": "2020-01-01T00:00:00Z", "to": "2020-01-02T00:00:00Z"}),
    ("GET", "/v1/recurring/{recurring_id}/next"): lambda t: _recurring(t, "/next"),
    ("GET", "/v1/recurring/{recurring_id}/firings"): lambda t: _recurring(t, "/firings"),
    ("POST", "/v1/policies"): lambda t: Call(
        Kind.CREATE, "/v1/policies", {"name": t.fresh("pol"), "max_in_flight": 1},
        witness="/v1/policies", params={"tenant": A}),
    ("GET", "/v1/policies"): lambda t: Call(Kind.LIST, "/v1/policies", seen=t.policy()),
    ("GET", "/v1/policies/{name}"): _named("policies", Tenants.policy),
    ("DELETE", "/v1/policies/{name}"): _named("policies", Tenants.policy),
    ("POST", "/v1/channels"): lambda t: Call(
        Kind.CREATE, "/v1/channels", {"name": t.fresh("ch"), "kind": "file", "config": {
            "path": f"{t.tmp.name}-elsewhere.jsonl"}}, witness="/v1/channels",
        params={"tenant": A}),
    ("GET", "/v1/channels"): lambda t: Call(Kind.LIST, "/v1/channels", seen=t.channel()),
    ("GET", "/v1/channels/{name}"): _named("channels", Tenants.channel),
    ("DELETE", "/v1/channels/{name}"): _named("channels", Tenants.channel),
    ("PUT", "/v1/tenants/{name}"): lambda t: Call(
        Kind.ADMIN, f"/v1/tenants/{A}", {"durability": "relaxed"}, witness=f"/v1/tenants/{A}"),
    ("GET", "/v1/tenants/{name}"): lambda t: Call(Kind.OWN, f"/v1/tenants/{A}"),
    ("GET", "/v1/tenants"): lambda t: Call(Kind.LIST, "/v1/tenants", seen=f'"{A}"'),
    ("GET", "/v1/ordering-keys"): lambda t: Call(Kind.LIST, "/v1/ordering-keys",
                                                 seen=t.halted_key()),
    ("POST", "/v1/ordering-keys/{ordering_key}/resume"): lambda t: Call(
        Kind.OWN, f"/v1/ordering-keys/{t.halted_key()}/resume", witness="/v1/ordering-keys"),
    ("POST", "/v1/apikeys"): lambda t: Call(Kind.ADMIN, "/v1/apikeys",
                                            {"role": "tenant", "tenant": A}),
    ("GET", "/v1/apikeys"): lambda t: Call(Kind.ADMIN, "/v1/apikeys"),
    ("GET", "/v1/audit"): lambda t: Call(Kind.ADMIN, "/v1/audit"),
    ("DELETE", "/v1/apikeys/{key_id}"): lambda t: Call(Kind.ADMIN,
                                                       f"/v1/apikeys/{t.key_id()}"),
    ("POST", "/v1/deliveries/{delivery_id}/release"): lambda t: _release(t),
    ("POST", "/v1/schedules/{schedule_id}/redrive"): lambda t: _dead(t),
    ("POST", "/v1/schedules/redrive"): lambda t: _redrive_where(t),
    ("POST", "/v1/channels/{name}/pause"): lambda t: Call(
        Kind.OWN, f"/v1/channels/{t.channel()}/pause", witness="/v1/paused-channels"),
    ("POST", "/v1/channels/{name}/test"): lambda t: _named_test(t),
    ("POST", "/v1/channels/{name}/resume"): lambda t: Call(
        Kind.OWN, f"/v1/channels/{t.paused()}/resume", witness="/v1/paused-channels"),
    ("GET", "/v1/status"): lambda t: Call(Kind.LIST, "/v1/status", seen=f'"{t.paused()}"'),
    ("GET", "/v1/paused-channels"): lambda t: Call(Kind.LIST, "/v1/paused-channels",
                                                   seen=f'"{t.paused()}"'),
    ("POST", "/v1/schedules/cancel"): lambda t: _by_predicate(t, "cancel", {}),
    ("POST", "/v1/schedules/reschedule"): lambda t: _by_predicate(t, "reschedule",
                                                                  {"shift": 60}),
    ("GET", "/v1/stats"): lambda t: _stats(t),
    ("GET", "/healthz"): lambda t: Call(Kind.OPEN, "/healthz"),
    ("GET", "/readyz"): lambda t: Call(Kind.OPEN, "/readyz"),
    ("GET", "/metrics"): lambda t: Call(Kind.ADMIN, "/metrics"),  # two tenants: keyed
}
"""Every route of the OpenAPI document, and how to call it about a fresh object of A's."""


def _named_test(t: Tenants) -> Call:
    """A test message: B's key gets 404 and sends nothing through A's channel."""
    name = t.channel()
    return Call(Kind.OWN, f"/v1/channels/{name}/test", witness=f"/v1/channels/{name}")


def _dead(t: Tenants) -> Call:
    sid = t.dead()
    return Call(Kind.OWN, f"/v1/schedules/{sid}/redrive", witness=f"/v1/schedules/{sid}")


def _redrive_where(t: Tenants) -> Call:
    """By predicate: B's call re-drives only B's own (none); A's re-drives its one."""
    channel = t.channel()
    sid = t.dead(channel=channel)
    return Call(Kind.LIST, "/v1/schedules/redrive", {"channel": channel},
                witness=f"/v1/schedules/{sid}", seen='"redriven":1')


def _release(t: Tenants) -> Call:
    delivery = t.held_token()
    policy = t.store.get(delivery.rsplit("-", 1)[0]).policy
    return Call(Kind.OWN, f"/v1/deliveries/{delivery}/release", witness=f"/v1/policies/{policy}")


@pytest.fixture(scope="module")
def tenants(api_server: ApiServer, api_store: Store,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    yield from two_tenants(api_store, api_server.url, api_server.admin_key,
                           tmp_path_factory.mktemp("tenancy"))


def _routes(api: httpx.Client) -> list[tuple[str, str]]:
    paths = api.get("/openapi.json").json()["paths"]
    return sorted((method.upper(), path) for path, ops in paths.items() for method in ops)


def test_every_route_is_in_the_matrix(api: httpx.Client) -> None:
    assert _routes(api) == sorted(ROUTES), "add the new route to ROUTES: how is it isolated?"


def _send(client: httpx.Client, method: str, call: Call, **params: str) -> httpx.Response:
    body = None if call.body is None else json.dumps(call.body)
    return client.request(method, call.path, content=body, params={**call.params, **params},
                          headers={"content-type": "application/json"} if body else {})


def _read(t: Tenants, call: Call) -> Any:
    if call.witness is None:
        return None
    r = t.a.get(call.witness)
    assert r.status_code == 200, r.text
    return r.json()


@pytest.mark.parametrize("route", sorted(ROUTES), ids=" ".join)
def test_tenant_b_cannot_reach_tenant_a(tenants: Tenants, route: tuple[str, str]) -> None:
    method, _ = route
    call = ROUTES[route](tenants)
    before = _read(tenants, call)
    keyed = call.path.startswith("/v1/") or call.path == "/metrics"
    for stranger in (tenants.anon, tenants.forged):
        r = _send(stranger, method, call)
        assert r.status_code == (401 if keyed else 200), r.text
        if keyed:
            assert r.headers["www-authenticate"].startswith("Bearer")

    b = _send(tenants.b, method, call)
    expected = {Kind.OWN: 404, Kind.LIST: 200, Kind.CREATE: 403, Kind.ADMIN: 403,
                Kind.OPEN: 200}[call.kind]
    assert b.status_code == expected, b.text
    if call.kind is Kind.LIST:
        assert call.seen is not None and call.seen not in b.text
    if call.kind is Kind.CREATE:
        assert b.json()["error"]["field"] == "tenant"
    if keyed:
        named = _send(tenants.b, method, call, tenant=A)
        assert named.status_code == 403 and named.json()["error"]["field"] == "tenant"

    ro = _send(tenants.a_ro, method, call)
    if method == "GET" and call.kind is not Kind.ADMIN:
        assert ro.status_code == 200, ro.text
    elif keyed:
        assert ro.status_code == 403 and ro.json()["error"]["field"] in ("method", "key")
    assert _read(tenants, call) == before, "a refused request changed A's object"

    if method == "GET" and call.kind in (Kind.OWN, Kind.LIST):
        admin = _send(tenants.admin, method, call, tenant=A)
        assert admin.status_code == 200, admin.text
        assert call.seen is None or call.seen in admin.text
    owner = tenants.admin if call.kind is Kind.ADMIN else tenants.a
    if call.kind is Kind.ADMIN:
        assert _send(tenants.a, method, call).status_code == 403
    done = _send(owner, method, call)
    assert 200 <= done.status_code < 300, done.text
    if call.kind is Kind.LIST:
        assert call.seen is not None and call.seen in done.text


def test_admin_reaches_every_tenant_and_lists_them_all(tenants: Tenants) -> None:
    made = tenants.schedule()["id"]
    r = tenants.b.post("/v1/schedules", json={"channel": "out", "payload": 2, "delay": 60})
    theirs = r.json()["id"]
    everyone = tenants.admin.get("/v1/schedules", params={"limit": 1000}).text
    assert made in everyone and theirs in everyone
    only_b = tenants.admin.get("/v1/schedules", params={"limit": 1000, "tenant": "globex"})
    assert theirs in only_b.text and made not in only_b.text
    assert tenants.admin.get(f"/v1/schedules/{made}").json()["tenant"] == A
    channels = tenants.admin.get("/v1/channels").json()["items"]
    assert {(c["tenant"], c["name"]) for c in channels} >= {(A, "out"), ("globex", "out")}


def test_one_name_in_two_tenants_is_two_channels(tenants: Tenants) -> None:
    """A name that exists in both tenants resolves in the caller's own namespace."""
    a = tenants.a.get("/v1/channels/out").json()
    b = tenants.b.get("/v1/channels/out").json()
    assert (a["tenant"], b["tenant"]) == (A, "globex")
    assert a["config"] != b["config"]

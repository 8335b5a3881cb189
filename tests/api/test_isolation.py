"""Regression tests for issue 10's first finding: no route asked who was calling, and
``tenant`` was a field the caller filled in, so any caller listed, read, cancelled, PATCHed and
task-key-overwrote any tenant's schedules, replaced any channel (re-pointing every tenant's
deliveries), and set any tenant's durability. Each test below failed on that code."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tests.support.tenants import A, B, Tenants, two_tenants
from tocsin.abc import Store
from tocsin.client import Client
from tocsin.testing.api_server import ApiServer


@pytest.fixture(scope="module")
def tenants(api_server: ApiServer, api_store: Store,
            tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tenants]:
    yield from two_tenants(api_store, api_server.url, api_server.admin_key,
                           tmp_path_factory.mktemp("isolation"))


def test_no_key_no_answer(tenants: Tenants) -> None:
    for method, path in (("GET", "/v1/schedules"), ("POST", "/v1/schedules"),
                         ("GET", "/v1/channels"), ("PUT", f"/v1/tenants/{A}")):
        r = tenants.anon.request(method, path, json={})
        assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
        assert r.json()["error"]["type"] == "AuthenticationError"
    for header in ("Basic dXNlcjpwYXNz", "Bearer", "Bearer not-a-key", "tsk_x"):
        r = httpx.get(str(tenants.a.base_url.join("/v1/schedules")),
                      headers={"authorization": header})
        assert r.status_code == 401, header


def test_listing_shows_only_the_callers_schedules(tenants: Tenants) -> None:
    mine = tenants.schedule()["id"]
    theirs = tenants.b.post("/v1/schedules", json={"channel": "out", "payload": 1,
                                                   "delay": 60}).json()["id"]
    b_sees = {s["id"] for s in tenants.b.get("/v1/schedules?limit=1000").json()["items"]}
    assert theirs in b_sees and mine not in b_sees
    assert tenants.b.get("/v1/schedules", params={"tenant": A}).status_code == 403


def test_reading_cancelling_patching_anothers_schedule_is_404(tenants: Tenants) -> None:
    sid = tenants.schedule()["id"]
    before = tenants.a.get(f"/v1/schedules/{sid}").json()
    for method, body in (("GET", None), ("DELETE", None), ("PATCH", {"delay": 9}),
                         ("GET", None)):
        r = tenants.b.request(method, f"/v1/schedules/{sid}", json=body)
        assert r.status_code == 404, r.text
        assert r.json()["error"]["message"] == f"schedule {sid!r} not found"
    assert tenants.b.get(f"/v1/schedules/{sid}/deliveries").status_code == 404
    assert tenants.a.get(f"/v1/schedules/{sid}").json() == before
    assert before["status"] == "PENDING"


def test_a_task_key_overwrites_only_in_its_own_tenant(tenants: Tenants) -> None:
    due = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    task = {"channel": "out", "due_at": due, "ordering_key": "invoice-7",
            "uniqueness_key": "send"}
    mine = tenants.schedule(payload={"v": "mine"}, **task)
    theirs = tenants.b.post("/v1/schedules", json={**task, "payload": {"v": "theirs"}})
    assert theirs.status_code == 201 and theirs.json()["id"] != mine["id"]
    named = tenants.b.post("/v1/schedules", json={**task, "payload": {"v": "x"}, "tenant": A})
    assert named.status_code == 403 and named.json()["error"]["field"] == "tenant"
    batch = tenants.b.post("/v1/schedules", json={"schedules": [
        {**task, "payload": 1}, {**task, "payload": {"v": "x"}, "tenant": A}]})
    assert batch.status_code == 403
    assert tenants.a.get(f"/v1/schedules/{mine['id']}").json()["payload"] == {"v": "mine"}


def test_an_idempotency_key_is_per_tenant(tenants: Tenants) -> None:
    mine = tenants.schedule(key="order-1", payload={"v": 1})
    theirs = tenants.b.post("/v1/schedules", json={"channel": "out", "payload": {"v": 2},
                                                   "delay": 3600, "key": "order-1"})
    assert theirs.status_code == 201 and theirs.json()["id"] != mine["id"]
    again = tenants.a.post("/v1/schedules", json={"channel": "out", "payload": {"v": 1},
                                                  "delay": 3600, "key": "order-1"})
    assert again.status_code == 200 and again.json()["id"] == mine["id"]


def test_registering_a_channel_never_replaces_anothers(tenants: Tenants) -> None:
    before = tenants.a.get("/v1/channels/out").json()
    hijack = {"name": "out", "kind": "file", "config": {"path": f"{tenants.tmp.name}-stolen"}}
    assert tenants.b.post("/v1/channels", json=hijack, params={"tenant": A}).status_code == 403
    assert tenants.b.post("/v1/channels", json=hijack).status_code == 201, "B's own 'out'"
    assert tenants.a.get("/v1/channels/out").json() == before
    assert tenants.b.delete("/v1/channels/nothing-of-b").status_code == 404
    made = tenants.channel()
    assert tenants.b.delete(f"/v1/channels/{made}").status_code == 404
    assert tenants.a.get(f"/v1/channels/{made}").status_code == 200


def test_only_an_admin_sets_durability(tenants: Tenants) -> None:
    before = tenants.a.get(f"/v1/tenants/{A}").json()
    for who in (tenants.b, tenants.a):
        r = who.put(f"/v1/tenants/{A}", json={"durability": "relaxed"})
        assert r.status_code == 403 and r.json()["error"]["type"] == "ForbiddenError"
    assert tenants.a.get(f"/v1/tenants/{A}").json() == before
    assert tenants.b.get(f"/v1/tenants/{A}").status_code == 404
    assert tenants.b.get(f"/v1/tenants/{B}").status_code == 200
    r = tenants.admin.put(f"/v1/tenants/{A}", json={"durability": "relaxed"})
    assert r.status_code == 200 and tenants.a.get(f"/v1/tenants/{A}").json()["durability"] \
        == "relaxed"


def test_a_read_only_key_only_reads(tenants: Tenants) -> None:
    sid = tenants.schedule()["id"]
    assert tenants.a_ro.get(f"/v1/schedules/{sid}").status_code == 200
    for method in ("DELETE", "PATCH"):
        r = tenants.a_ro.request(method, f"/v1/schedules/{sid}", json={"delay": 5})
        assert r.status_code == 403 and r.json()["error"]["field"] == "method"
    r = tenants.a_ro.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 5})
    assert r.status_code == 403
    assert tenants.a.get(f"/v1/schedules/{sid}").json()["status"] == "PENDING"


def test_a_revoked_key_is_refused_at_once(tenants: Tenants) -> None:
    made = tenants.admin.post("/v1/apikeys", json={"role": "tenant", "tenant": B,
                                                   "name": "short-lived"})
    assert made.status_code == 201
    key = made.json()
    assert key["token"].startswith(f"tsk_{key['id']}_") and "digest" not in key
    headers = {"authorization": f"Bearer {key['token']}"}
    url = str(tenants.a.base_url.join("/v1/schedules"))
    assert httpx.get(url, headers=headers).status_code == 200
    listed = tenants.admin.get("/v1/apikeys", params={"tenant": B}).json()["items"]
    assert key["id"] in {k["id"] for k in listed}
    assert all("token" not in k and "digest" not in k for k in listed)
    revoked = tenants.admin.delete(f"/v1/apikeys/{key['id']}")
    assert revoked.status_code == 200 and revoked.json()["revoked_at"] is not None
    assert httpx.get(url, headers=headers).status_code == 401
    assert tenants.admin.delete("/v1/apikeys/key_0000000000000000").status_code == 404


@pytest.mark.parametrize(("body", "field"), [
    ({"role": "tenant"}, "tenant"), ({"role": "admin", "tenant": A}, "tenant"),
    ({"role": "root"}, "role"), ({"role": "tenant", "tenant": "a b"}, "tenant"),
])
def test_bad_keys_name_the_field(tenants: Tenants, body: dict[str, str], field: str) -> None:
    r = tenants.admin.post("/v1/apikeys", json=body)
    assert r.status_code == 422 and r.json()["error"]["field"] == field


def test_the_client_resumes_its_own_tenants_key_without_naming_it(tenants: Tenants) -> None:
    halted = tenants.halted_key()
    token = tenants.a.headers["authorization"].removeprefix("Bearer ")
    with Client(str(tenants.a.base_url), api_key=token) as client:
        assert [k["ordering_key"] for k in client.halted_keys()] == [halted]
        assert client.resume_key(halted)["halted"] is False
        assert client.halted_keys() == []

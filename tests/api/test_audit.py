"""Issue 40, finding 7: the audit log, over real HTTP on both stores. Every change of a
channel, key, policy, rule, tenant setting, pause and resume, bulk operation and re-drive is
recorded with who, what, when and from where, and admins read it (``GET /v1/audit``,
``tocsin audit``, the dashboard); a schedule's own create is not, and no secret is kept."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pyarrow.parquet as pq
import pytest
from pyarrow import fs

from tests.channels.envelopes import SECRET
from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.domain import Role
from tocsin.domain.audit import AuditEntry, audit_id
from tocsin.pipelines.archive import Retention
from tocsin.pipelines.archive_audit import archive_audit
from tocsin.testing.api_server import ApiServer


@pytest.fixture(scope="module")
def tenant_api(api_server: ApiServer, api_store: Store) -> Iterator[tuple[httpx.Client, str]]:
    key, token = issue_key(api_store, role=Role.TENANT, tenant="audited", now_ms=0)
    with httpx.Client(base_url=api_server.url, timeout=30,
                      headers={"authorization": f"Bearer {token}"}) as client:
        yield client, key.id


def _changes(api: httpx.Client, tenant_api: httpx.Client) -> None:
    hook = {"name": "hook", "kind": "webhook", "config": {
        "url": "http://127.0.0.1:9/in", "secret": SECRET,
        "headers": {"Authorization": "Bearer tok-audit-123"}}}
    for r in (
        tenant_api.post("/v1/channels", json=hook),
        tenant_api.post("/v1/channels/hook/pause"),
        tenant_api.post("/v1/channels/hook/resume"),
        tenant_api.post("/v1/recurring", json={"cron": "0 9 * * *", "channel": "hook",
                                               "payload": 1}),
        tenant_api.post("/v1/schedules", json={"channel": "hook", "payload": 1, "delay": 600}),
        tenant_api.post("/v1/schedules/cancel", json={"channel": "hook"}),
        api.put("/v1/tenants/audited", json={"durability": "strict"}),
        api.post("/v1/apikeys", json={"role": "tenant", "tenant": "audited", "name": "ci"}),
    ):
        assert r.status_code < 400, r.text


def test_changes_are_recorded_with_who_what_when_where(
        api: httpx.Client, tenant_api: tuple[httpx.Client, str]) -> None:
    client, key_id = tenant_api
    _changes(api, client)
    r = api.get("/v1/audit", params={"tenant": "audited", "limit": 1000})
    assert r.status_code == 200, r.text
    items = r.json()["items"]
    actions = [i["action"] for i in items]
    for action in ("POST /v1/channels", "POST /v1/channels/{name}/pause",
                   "POST /v1/channels/{name}/resume", "POST /v1/recurring",
                   "POST /v1/schedules/cancel", "PUT /v1/tenants/{name}", "POST /v1/apikeys"):
        assert action in actions, (action, actions)
    assert "POST /v1/schedules" not in actions  # a schedule's own create is the tenant's data
    mine = [i for i in items if i["key_id"] == key_id]
    assert {i["key_tenant"] for i in mine} == {"audited"}
    assert {i["client"] for i in items} == {"127.0.0.1"}
    assert all(i["at"].endswith("Z") and i["status"] < 400 for i in items)
    pause = next(i for i in items if i["action"] == "POST /v1/channels/{name}/pause")
    assert pause["target"] == "/v1/channels/hook/pause"
    text = json.dumps(items)
    assert SECRET not in text and "tok-audit-123" not in text  # no body, no secret


def test_only_admins_read_it_and_it_pages(api: httpx.Client,
                                          tenant_api: tuple[httpx.Client, str]) -> None:
    client, key_id = tenant_api
    assert client.get("/v1/audit").status_code == 403
    _changes(api, client)
    first = api.get("/v1/audit", params={"key_id": key_id, "limit": 2}).json()
    assert len(first["items"]) == 2 and first["next_cursor"]
    second = api.get("/v1/audit", params={"key_id": key_id, "limit": 2,
                                          "cursor": first["next_cursor"]}).json()
    assert second["items"][0]["id"] > first["items"][-1]["id"]
    pauses = api.get("/v1/audit", params={"action": "POST /v1/channels/{name}/p"}).json()
    assert pauses["items"] and {i["action"] for i in pauses["items"]} == {
        "POST /v1/channels/{name}/pause"}
    bad = api.get("/v1/audit", params={"since": "yesterday"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "since"


def test_old_entries_are_archived_then_deleted(api_store: Store, tmp_path: Path) -> None:
    now = int(time.time() * 1000)
    old = [AuditEntry(id=audit_id(now - 90 * 86_400_000) + str(n), at_ms=now - 90 * 86_400_000,
                      key_id="key_x", key_tenant=None, tenant="old-one", action="DELETE /v1/x",
                      target="/v1/x", status=204) for n in range(3)]
    fresh = AuditEntry(id=audit_id(now), at_ms=now, key_id="key_x", key_tenant=None,
                       tenant="old-one", action="DELETE /v1/x", target="/v1/x", status=204)
    for entry in [*old, fresh]:
        api_store.record_audit(entry)
    retention = Retention(default_ms=30 * 86_400_000)
    done = archive_audit(api_store, retention, now_ms=now, fs=fs.LocalFileSystem(),
                         base=str(tmp_path))
    assert done == 3
    kept = api_store.list_audit(tenant="old-one")
    assert [e.id for e in kept] == [fresh.id]
    table = pq.read_table(str(tmp_path / "audit" / f"run={now}" / "part-0.parquet"))
    assert sorted(table.column("id").to_pylist()) == sorted(e.id for e in old)

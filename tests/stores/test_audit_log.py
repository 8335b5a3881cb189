"""The audit log at the store and through ``tocsin audit --local``, on every backend."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from tocsin.cli.app import app
from tocsin.domain.audit import AuditEntry, audit_id
from tocsin.stores import open_store


def _entry(at_ms: int, action: str, tenant: str | None) -> AuditEntry:
    return AuditEntry(id=audit_id(at_ms), at_ms=at_ms, key_id="key_0123456789abcdef",
                      key_tenant=tenant, tenant=tenant, action=action, target="/v1/x",
                      status=200, client="127.0.0.1", detail='{"name": "x"}')


def test_filters_pages_and_the_cli(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    store = open_store(store_url)
    try:
        entries = [_entry(1_000 + n, a, t) for n, (a, t) in enumerate([
            ("POST /v1/channels", "acme"), ("DELETE /v1/channels/{name}", "acme"),
            ("POST /v1/channels", "globex"), ("PUT /v1/tenants/{name}", None)])]
        for e in entries:
            store.record_audit(e)
        assert [e.id for e in store.list_audit()] == [e.id for e in entries]
        assert [e.tenant for e in store.list_audit(tenant="acme")] == ["acme", "acme"]
        assert len(store.list_audit(action="POST /v1/channels")) == 2
        assert [e.at_ms for e in store.list_audit(since_ms=1_001, until_ms=1_003)] == [1_001,
                                                                                     1_002]
        assert store.list_audit(after_id=entries[1].id, limit=1)[0].id == entries[2].id
        assert store.delete_audit([entries[0].id]) == 1
    finally:
        store.close()
    monkeypatch.setenv("TOCSIN_STORE", store_url)
    ran = CliRunner().invoke(app, ["audit", "--local", "--tenant", "globex"])
    assert ran.exit_code == 0, ran.output
    [shown] = json.loads(ran.output)
    assert shown["action"] == "POST /v1/channels" and shown["client"] == "127.0.0.1"
    assert shown["detail"] == {"name": "x"}

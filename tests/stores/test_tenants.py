"""Tenant durability: each tenant's creates are committed as strictly as it is configured,
read back from the database's own setting in the committing transaction."""

from __future__ import annotations

from typing import Any

import pytest

from tocsin.abc import Store
from tocsin.domain import Durability, Tenant
from tocsin.stores.postgres import PostgresStore
from tocsin.stores.sqlite import SQLiteStore

from .test_store import NOW, new


def _commit_levels(store: Store, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The durability setting each following create committed with: PostgreSQL's
    ``synchronous_commit`` inside the transaction; SQLite's ``synchronous`` level, which it
    only lets a connection change between transactions."""
    seen: list[str] = []
    if isinstance(store, PostgresStore):
        apply = store._apply_durability

        def spy(conn: Any, relaxed: bool) -> None:
            apply(conn, relaxed)
            seen.append(conn.execute("SHOW synchronous_commit").fetchone()[0])

        monkeypatch.setattr(store, "_apply_durability", spy)
    else:
        assert isinstance(store, SQLiteStore)
        create = store.create

        def spy_create(*args: Any, **kwargs: Any) -> Any:
            out = create(*args, **kwargs)
            level = store._conn.execute("PRAGMA synchronous").fetchone()[0]
            seen.append({1: "off", 2: "on"}[level])  # NORMAL / FULL
            return out

        monkeypatch.setattr(store, "create", spy_create)
    return seen


def test_each_tenants_creates_commit_as_configured(store: Store,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    assert store.get_tenant("fast") == Tenant("fast", Durability.STRICT, configured=False)
    store.put_tenant(Tenant("fast", Durability.RELAXED), now_ms=NOW)
    store.put_tenant(Tenant("safe", Durability.STRICT), now_ms=NOW)
    assert store.list_tenants() == [Tenant("fast", Durability.RELAXED),
                                    Tenant("safe", Durability.STRICT)]
    seen = _commit_levels(store, monkeypatch)
    store.create([new(tenant="fast")], now_ms=NOW)
    store.create([new(tenant="safe")], now_ms=NOW)
    store.create([new(tenant="never-configured")], now_ms=NOW)
    store.create([new(tenant="fast"), new(tenant="safe")], now_ms=NOW)  # mixed: strict
    store.create([new(tenant="fast")], now_ms=NOW)
    assert seen == ["off", "on", "on", "on", "off"]
    store.put_tenant(Tenant("fast", Durability.STRICT), now_ms=NOW)
    store.create([new(tenant="fast")], now_ms=NOW)
    assert seen[-1] == "on"

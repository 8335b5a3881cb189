"""Creating, migrating and reopening stores, on every backend."""

from __future__ import annotations

import os
import sqlite3
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Policy, Status
from tocsin.errors import StoreError
from tocsin.stores import open_store
from tocsin.stores.rows import migrations
from tocsin.stores.sql.schedules import INSERT
from tocsin.stores.sqlite import SQLiteStore

from .conftest import OpenStore

NOW = 1_700_000_000_000
LATEST = max(number for number, _ in migrations("sqlite"))


def test_latest_versions_agree() -> None:
    assert [n for n, _ in migrations("sqlite")] == [n for n, _ in migrations("postgres")]


def test_new_store_records_schema_version(open_backend: OpenStore) -> None:
    store = open_backend(buckets=8)
    assert store.schema_version == LATEST  # type: ignore[attr-defined]
    assert store.buckets == 8


def test_reopen_keeps_data_and_is_idempotent(open_backend: OpenStore) -> None:
    first = open_backend()
    [(made, _)] = first.create([NewSchedule(channel="out", payload=b"1", due_ms=NOW, key="k")],
                               now_ms=NOW)
    first.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": "x"}))
    epoch = first.next_epoch()
    first.beat("dispatcher", now_ms=NOW, info={"n": 1})
    first.close()
    for _ in range(3):
        again = open_backend()
        assert again.schema_version == LATEST  # type: ignore[attr-defined]
        assert again.get(made.id) == made
        assert again.get_channel("out", tenant="default").config == {"path": "x"}
        assert again.last_beat("dispatcher") == (NOW, {"n": 1})
        assert again.next_epoch() > epoch
        epoch = again.next_epoch()
        # the unique key survived too
        assert again.create([NewSchedule(channel="out", payload=b"1", due_ms=NOW, key="k")],
                            now_ms=NOW) == [(made, False)]
        again.close()


def test_buckets_fixed_at_creation(open_backend: OpenStore) -> None:
    created = open_backend(buckets=4)
    assert created.buckets == 4
    created.close()
    reopened = open_backend(buckets=64)
    assert reopened.buckets == 4
    made = reopened.create([NewSchedule(channel="out", payload=b"1", due_ms=NOW)
                            for _ in range(100)], now_ms=NOW)
    assert {s.bucket for s, _ in made} <= {0, 1, 2, 3}


def test_concurrent_first_opens(store_url: str) -> None:
    """Several processes' first open of one new store: one creates it, all agree on it."""
    start = threading.Barrier(6)

    def first_open(i: int) -> tuple[int, int]:
        start.wait()
        store = open_store(store_url, buckets=4 + i)
        try:
            store.create([NewSchedule(channel="out", payload=b"1", due_ms=NOW)], now_ms=NOW)
            return store.buckets, store.schema_version  # type: ignore[attr-defined]
        finally:
            store.close()

    with ThreadPoolExecutor(6) as pool:
        seen = set(pool.map(first_open, range(6)))
    assert len(seen) == 1
    [(buckets, version)] = seen
    assert 4 <= buckets < 10 and version == LATEST
    store = open_store(store_url)
    try:
        assert store.counts()[Status.PENDING] == 6
    finally:
        store.close()


def test_version_7_gives_existing_rows_the_default_tenant(open_backend: OpenStore,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A store made at version 6 (channels and policies keyed by name alone) keeps its channel,
    policy and held token, all in the tenant 'default'."""
    import tocsin.stores.postgres
    import tocsin.stores.sqlite

    for module in (tocsin.stores.sqlite, tocsin.stores.postgres):
        monkeypatch.setattr(module, "migrations",
                            lambda dialect: [m for m in migrations(dialect) if m[0] <= 6])
    old = open_backend()
    assert old.schema_version == 6  # type: ignore[attr-defined]
    q = old._dialect.q  # type: ignore[attr-defined]
    old._work(lambda conn: [conn.execute(q(sql), args) for sql, args in (  # type: ignore[attr-defined]
        ("INSERT INTO channels VALUES (?, ?, ?)", ("out", "file", '{"path": "x"}')),
        ("INSERT INTO policies VALUES (?, ?, ?, ?, ?, ?, ?)", ("p", 2, None, 60_000, 1, NOW, NOW)),
        ("INSERT INTO tokens VALUES (?, ?, ?, ?, ?)", ("d-1", "p", "d", NOW, NOW + 60_000)))])
    old.close()
    monkeypatch.undo()
    new = open_backend()
    assert new.schema_version == LATEST  # type: ignore[attr-defined]
    assert new.get_channel("out", tenant="default") == ChannelSpec(
        name="out", kind=ChannelKind.FILE, config={"path": "x"})
    assert new.get_policy("p", tenant="default") == Policy(name="p", max_in_flight=2,
                                                           token_lease_ms=60_000)
    assert new.in_flight("p", tenant="default", now_ms=NOW) == 1
    assert new.release("d-1", now_ms=NOW, tenant="default")


def test_a_schema_newer_than_the_code_is_refused(open_backend: OpenStore,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """A process of an older Tocsin (here: one that knows one migration less) started against
    a store a later one migrated refuses it, rather than writing rows that schema no longer
    means (docs/deploy.md#upgrades: stop, migrate, start)."""
    import tocsin.stores.postgres
    import tocsin.stores.sqlite

    open_backend().close()
    for module in (tocsin.stores.sqlite, tocsin.stores.postgres):
        monkeypatch.setattr(module, "migrations",
                            lambda dialect: [m for m in migrations(dialect) if m[0] < LATEST])
    with pytest.raises(StoreError, match=f"schema is version {LATEST}, newer than this Tocsin"):
        old = open_backend()
        old.counts()


def test_tocsin_migrate(store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``tocsin migrate``: the upgrade's middle step brings the store to this version's schema
    and says so; against a store newer than itself it exits 1 naming the versions."""
    import json

    from typer.testing import CliRunner

    import tocsin.stores.postgres
    import tocsin.stores.sqlite
    from tocsin.cli import app

    done = CliRunner().invoke(app, ["migrate", "--store", store_url])
    assert done.exit_code == 0, done.output
    assert json.loads(done.output)["schema_version"] == LATEST
    for module in (tocsin.stores.sqlite, tocsin.stores.postgres):
        monkeypatch.setattr(module, "migrations",
                            lambda dialect: [m for m in migrations(dialect) if m[0] < LATEST])
    refused = CliRunner().invoke(app, ["migrate", "--store", store_url])
    assert refused.exit_code == 1 and f"schema is version {LATEST}, newer" in refused.output


def test_sqlite_writes_a_schedule_without_a_temporary_table(tmp_path: Path) -> None:
    """A partial index whose predicate holds an IN list of more than two values makes SQLite
    build a temporary table each time it writes a row: an insert, and a change of status (a
    claim, an acknowledgement), must test every predicate in place."""
    path = tmp_path / "store.db"
    open_store(f"sqlite:///{path}").close()
    conn = sqlite3.connect(path)
    writes = (INSERT, "UPDATE schedules SET status = 'CLAIMED' WHERE id = ?",
              "UPDATE schedules SET status = 'DELIVERED' WHERE id = ?")
    for sql in writes:
        ops = [row[1] for row in conn.execute(f"EXPLAIN {sql}", [None] * sql.count("?"))]
        assert "OpenEphemeral" not in ops, sql
    conn.close()


def test_a_refused_sqlite_store_leaves_nothing_open(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Refusing a store of a newer schema closes what the attempt opened (its connections
    and lock files), even while the error is still held."""
    import tocsin.stores.sqlite

    SQLiteStore(tmp_path / "t.db").close()
    monkeypatch.setattr(tocsin.stores.sqlite, "migrations",
                        lambda dialect: [m for m in migrations(dialect) if m[0] < LATEST])

    def open_here() -> list[str]:
        found = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                target = os.readlink(f"/proc/self/fd/{fd}")
            except OSError:
                continue
            if target.startswith(str(tmp_path)):
                found.append(target)
        return found

    with pytest.raises(StoreError, match="newer than this Tocsin") as refused:
        SQLiteStore(tmp_path / "t.db")
    assert refused.traceback, "the error (and its frames) still held"
    assert open_here() == []

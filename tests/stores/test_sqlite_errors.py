"""A broken SQLite database answers :class:`~tocsin.errors.StoreError` from every read (503 in
the API; the dispatcher skips a trigger), never a raw ``sqlite3`` error."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tocsin.abc import Store
from tocsin.errors import StoreError
from tocsin.stores.sqlite import SQLiteStore

NOW = 1_700_000_000_000

READS: dict[str, Callable[[Store], Any]] = {
    "get": lambda s: s.get("x"),
    "list": lambda s: s.list_schedules(),
    "deliveries": lambda s: s.deliveries("x"),
    "halted_keys": lambda s: s.halted_keys(),
    "pending_count": lambda s: s.pending_count(tenant="a"),
    "get_channel": lambda s: s.get_channel("out", tenant="a"),
    "list_channels": lambda s: s.list_channels(),
    "next_due_ms": lambda s: s.next_due_ms(now_ms=NOW, lease_ms=1),
    "get_recurring": lambda s: s.get_recurring("x"),
    "list_recurring": lambda s: s.list_recurring(),
    "recurring_due": lambda s: s.recurring_due(bucket_lo=0, bucket_hi=1, now_ms=NOW, limit=1),
    "next_expansion_ms": lambda s: s.next_expansion_ms(),
    "recurring_firings": lambda s: s.recurring_firings("x"),
    "get_policy": lambda s: s.get_policy("p", tenant="a"),
    "list_policies": lambda s: s.list_policies(),
    "in_flight": lambda s: s.in_flight("p", tenant="a", now_ms=NOW),
    "get_tenant": lambda s: s.get_tenant("a"),
    "list_tenants": lambda s: s.list_tenants(),
    "key_by_digest": lambda s: s.key_by_digest("d"),
    "list_keys": lambda s: s.list_keys(),
    "last_beat": lambda s: s.last_beat("dispatcher"),
    "counts": lambda s: s.counts(),
    "due_backlog": lambda s: s.due_backlog(now_ms=NOW),
}


@pytest.fixture(scope="module")
def broken(tmp_path_factory: pytest.TempPathFactory) -> Store:
    """A store whose tables another process dropped after it opened them."""
    path = Path(tmp_path_factory.mktemp("broken")) / "store.db"
    store = SQLiteStore(path, buckets=4)
    store.list_schedules()  # this thread's connection is open and has read the schema
    other = sqlite3.connect(path, isolation_level=None)
    tables = [r[0] for r in other.execute("SELECT name FROM sqlite_master WHERE type = 'table' "
                                          "AND name <> 'meta'")]
    for table in tables:
        other.execute(f"DROP TABLE {table}")
    other.close()
    return store


@pytest.mark.parametrize("read", sorted(READS))
def test_every_read_answers_store_error(broken: Store, read: str) -> None:
    with pytest.raises(StoreError, match="sqlite"):
        READS[read](broken)


def test_a_write_answers_store_error_too(broken: Store) -> None:
    with pytest.raises(StoreError):
        broken.cancel("x", now_ms=NOW)
    with pytest.raises(StoreError):
        broken.claim(epoch=broken.next_epoch(), bucket_lo=0, bucket_hi=3, until_ms=NOW,
                     now_ms=NOW, lease_ms=1, limit=10)


def test_a_file_that_cannot_be_opened_answers_store_error(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="sqlite"):
        SQLiteStore(tmp_path)  # a directory, not a database file

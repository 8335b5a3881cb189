"""The pipelines' writes against writers that insert their keys meanwhile (PostgreSQL, where
writers run side by side)."""

from __future__ import annotations

import threading
import time
from typing import Any

import psycopg

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.domain.defaults import KEY_RETENTION_MS
from tocsin.errors import ConflictError
from tocsin.ids import new_schedule_ids
from tocsin.pipelines.writes import store_pending
from tocsin.stores import open_store
from tocsin.stores.rows import INSERT_COLUMNS, insert_values, pending_of

NOW = 1_800_000_000_000


def _item(key: str, n: int = 0) -> NewSchedule:
    return NewSchedule(channel="out", payload=b'{"n": %d}' % n, due_ms=NOW + 60_000, key=key)


def _counting_creates(store: Store) -> list[int]:
    """The sizes of the store's ``create`` calls from now on."""
    creates: list[int] = []
    real_create = store.create

    def counted(batch: Any, **kwargs: Any) -> Any:
        creates.append(len(batch))
        return real_create(batch, **kwargs)

    store.create = counted  # type: ignore[method-assign,assignment]
    return creates


def _insert_uncommitted(conn: psycopg.Connection[Any], item: NewSchedule) -> None:
    values = insert_values(item, buckets=16, now_ms=NOW, new_id=new_schedule_ids(NOW, 1)[0])
    conn.execute(f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES "
                 f"({', '.join(['%s'] * len(values))})", values)


def _blocked_by(url: str, holder: psycopg.Connection[Any], deadline_s: float = 20.0) -> bool:
    """Whether some session comes to wait on ``holder``'s open transaction."""
    end = time.monotonic() + deadline_s
    with psycopg.connect(url, autocommit=True) as conn:
        while time.monotonic() < end:
            row = conn.execute("SELECT count(*) FROM pg_stat_activity "
                               "WHERE %s = ANY(pg_blocking_pids(pid))",
                               (holder.info.backend_pid,)).fetchone()
            if row and row[0]:
                return True
            time.sleep(0.02)
    return False


def test_keys_inserted_meanwhile_are_answered_without_leaving_the_bulk_path(
        postgres_store_url: str) -> None:
    """A chunk holding a stored key is written after a lookup of its keys; its COPY then
    meets a key that another writer inserts meanwhile and fails as a whole, and so does the
    next try, on a key a third writer inserts. The write tries the chunk again: both keys
    are held by now, and answered as held keys (here another request's: their conflicts),
    the stored one as a repeat, every other row is created, and none went through
    ``create`` (which, refused by one item, took the chunk one item at a time)."""
    store = open_store(postgres_store_url, buckets=16)
    try:
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
        items = [_item(f"k{n:03d}") for n in range(200)]
        assert store_pending(store, [pending_of(items[50])], now_ms=NOW,
                             key_retention_ms=KEY_RETENTION_MS) == [True]
        creates = _counting_creates(store)
        answers: list[Any] = []
        with psycopg.connect(postgres_store_url) as first, \
                psycopg.connect(postgres_store_url) as second:
            _insert_uncommitted(first, _item("k100", n=1))
            _insert_uncommitted(second, _item("k150", n=1))
            writer = threading.Thread(target=lambda: answers.extend(store_pending(
                store, [pending_of(i) for i in items], now_ms=NOW,
                key_retention_ms=KEY_RETENTION_MS)))
            writer.start()
            assert _blocked_by(postgres_store_url, first), "the COPY never met k100"
            first.commit()
            assert _blocked_by(postgres_store_url, second), "the next try never met k150"
            second.commit()
        writer.join(timeout=60)
        assert not writer.is_alive()
        assert [type(a) for a in answers] == [
            ConflictError if n in (100, 150) else bool for n in range(200)]
        assert [n for n, a in enumerate(answers) if a is False] == [50]
        assert creates == []
        assert store.counts()[Status.PENDING] == 200  # the chunk's 198 and the two others'
    finally:
        store.close()


def test_a_conflict_refusing_a_whole_create_is_found_by_halves(
        tmp_path: Any, monkeypatch: Any) -> None:
    """When the bulk path cannot take the items (here it always fails, as in an outage of
    it) ``create`` decides; one item's conflict refuses them all, and the items are written
    again in halves until only that item is left out: a few transactions, not one per
    item."""
    from tocsin.pipelines import writes
    from tocsin.stores.sql import bulk

    store = open_store(f"sqlite:///{tmp_path / 'store.db'}", buckets=16)
    try:
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
        held = writes.create_many(store, [_item("k040", n=1)], now_ms=NOW)[0]
        assert not isinstance(held, ConflictError) and held[1] is True

        def outage(*_: Any, **__: Any) -> Any:
            from tocsin.errors import StoreError
            raise StoreError("the bulk path is out")

        monkeypatch.setattr(bulk, "create_keyed", outage)
        creates = _counting_creates(store)
        items = [_item(f"k{n:03d}") for n in range(64)]
        answers = writes.create_many(store, items, now_ms=NOW)
        assert [type(a) for a in answers] == [
            ConflictError if n == 40 else tuple for n in range(64)]
        assert all(a[1] is True for a in answers if isinstance(a, tuple))
        assert len(creates) <= 2 * 6 + 1  # halves down to the one item: 64 = 2 ** 6
        assert store.counts()[Status.PENDING] == 64  # 63 and the one held before
    finally:
        store.close()

"""The pipelines' bulk keyed create answers exactly as ``create``."""

from __future__ import annotations

from dataclasses import replace

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Schedule
from tocsin.domain.defaults import KEY_RETENTION_MS
from tocsin.errors import ConflictError
from tocsin.stores.rows import insert_values, item_of, pending_of, with_id
from tocsin.stores.sql import bulk
from tocsin.stores.sql.base import SQLITE, refresh_statistics
from tocsin.stores.sql.schedules import SqlSchedules

NOW = 1_800_000_000_000


def _item(key: str, n: int = 0, tenant: str = "default") -> NewSchedule:
    return NewSchedule(channel="out", payload=b'{"n": %d}' % n, due_ms=NOW + 60_000, key=key,
                       tenant=tenant)


def _created(answer: tuple[Schedule, bool] | ConflictError) -> tuple[Schedule, bool]:
    assert not isinstance(answer, ConflictError), answer
    return answer


def test_create_keyed(store: Store) -> None:
    """New keys are created, a stored key with the same request is a repeat (the same
    schedule), a repeat within the items too; another request on a stored key, or on a key
    given earlier in the same items, is answered with its conflict and only that item is
    left out; the lookup by key finds each in its tenant."""
    assert isinstance(store, SqlSchedules)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    first = [_created(a) for a in bulk.create_keyed(
        store, [_item("a"), _item("b"), _item("a", tenant="t2")], now_ms=NOW)]
    assert [new for _, new in first] == [True, True, True]
    again = [_created(a) for a in bulk.create_keyed(
        store, [_item("b"), _item("c"), _item("c")], now_ms=NOW)]
    assert (again[0][0].id, again[0][1]) == (first[1][0].id, False)
    assert [new for _, new in again] == [False, True, False]
    assert again[1][0].id == again[2][0].id
    mixed = bulk.create_keyed(store, [_item("d"), _item("a", n=1), _item("e"), _item("e", n=2)],
                              now_ms=NOW)
    assert [type(a) for a in mixed] == [tuple, ConflictError, tuple, ConflictError]
    refused = mixed[1]
    assert isinstance(refused, ConflictError) and refused.ident == first[0][0].id
    assert bulk.schedule_id_for_key(store, tenant="default", key="d") == _created(mixed[0])[0].id
    e = store.get(_created(mixed[2])[0].id)
    assert e.payload == b'{"n": 0}'  # the first request for "e" holds the key
    assert bulk.schedule_id_for_key(store, tenant="t2", key="a") == first[2][0].id
    assert bulk.schedule_id_for_key(store, tenant="default", key="a") == first[0][0].id
    assert store.get(first[0][0].id).payload == b'{"n": 0}'  # the refused request changed nothing


def _pending(store: SqlSchedules, items: list[NewSchedule]) -> list[bool | ConflictError]:
    return bulk.store_pending(store, [pending_of(item) for item in items], now_ms=NOW,
                              key_retention_ms=KEY_RETENTION_MS)


def test_store_pending_answers_as_create_keyed(store: Store) -> None:
    """The import's create (of rows made without a schedule each) answers only created
    (True), repeated (False) or the conflict, the same answers create_keyed gives, and
    stores the same rows as insert_values writes."""
    assert isinstance(store, SqlSchedules)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    first = [_item("a"), _item("b"), _item("a", tenant="t2")]
    assert _pending(store, first) == [True, True, True]
    for item in first:
        stored = store.get(bulk.schedule_id_for_key(store, tenant=item.tenant, key=str(item.key)))
        assert (with_id(pending_of(item), stored.id, buckets=store.buckets, now_ms=NOW)
                == insert_values(item, buckets=store.buckets, now_ms=NOW, new_id=stored.id))
        assert item_of(pending_of(item), key_retention_ms=KEY_RETENTION_MS) == replace(
            item, request_digest=item.fingerprint())
    answers = _pending(store, [_item("b"), _item("c"), _item("c"), _item("a", n=1),
                               _item("d", n=1), _item("d", n=2)])
    assert [a if isinstance(a, bool) else type(a) for a in answers] == [
        False, True, False, ConflictError, True, ConflictError]
    held = bulk.schedule_id_for_key(store, tenant="default", key="d")
    assert store.get(held).payload == b'{"n": 1}'
    assert store.counts()["PENDING"] == 5


def test_a_chunk_of_many_statements_answers_as_a_small_one(store: Store) -> None:
    """A chunk larger than one INSERT statement takes (SQLite puts 100 rows in each), with
    held keys and keys repeated among its rows, answers and stores as a small chunk does:
    the held keys repeated, the repeats within the chunk too, a key given to two requests
    refused the second time, every other row stored as insert_values writes it."""
    assert isinstance(store, SqlSchedules)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    held = [_item(f"k{n:03}") for n in range(0, 250, 7)]
    assert _pending(store, held) == [True] * len(held)
    items = [_item(f"k{n:03}") for n in range(250)] + [_item("k005"), _item("k201", n=1)]
    answers = _pending(store, items)
    assert answers[:250] == [n % 7 != 0 for n in range(250)]
    assert answers[250] is False and isinstance(answers[251], ConflictError)
    assert store.counts()["PENDING"] == 250
    for item in items[:250]:
        stored = store.get(bulk.schedule_id_for_key(store, tenant=item.tenant, key=str(item.key)))
        assert (stored.payload, stored.due_ms, stored.headers) == (
            item.payload, item.due_ms, item.headers)
        assert (with_id(pending_of(item), stored.id, buckets=store.buckets, now_ms=NOW)
                == insert_values(item, buckets=store.buckets, now_ms=NOW, new_id=stored.id))
    if store._dialect is SQLITE:  # a payload is stored as a BLOB however it was bound
        assert store._rows("SELECT DISTINCT typeof(payload) FROM schedules") == [("blob",)]


def test_a_bulk_load_keeps_the_planner_statistics_current(store: Store) -> None:
    """A load of 30 000 new schedules, a chunk at a time, looks no key up (nor refreshes the
    statistics for it); loaded again, every key looked up, it leaves the statistics of the
    schedules counting at least half of them (PostgreSQL): without that a lookup of keys reads
    every row of the tenant, and each chunk is slower than the last. SQLite's planner needs
    none: nothing is refreshed."""
    assert isinstance(store, SqlSchedules)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    rows = 30_000

    def load() -> None:
        for start in range(0, rows, 1_000):
            bulk.create_keyed(store, [_item(f"k{n}") for n in range(start, start + 1_000)],
                              now_ms=NOW)

    load()
    if store._dialect is SQLITE:
        assert not refresh_statistics(store)
        return
    load()
    counted = store._rows("SELECT reltuples FROM pg_class WHERE oid = 'schedules'::regclass")
    assert counted[0][0] >= rows / 2, counted

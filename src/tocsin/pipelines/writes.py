"""The pipelines' writes: through the SQL store's bulk keyed create and batched changes when
it has them (:mod:`tocsin.stores.sql.bulk`), else through the store's ``create``, ``cancel``
and ``reschedule``; and a schedule by key."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeGuard, TypeVar

from tocsin.abc import Store
from tocsin.domain import NewSchedule, Schedule
from tocsin.errors import ConflictError, StoreError, TocsinError
from tocsin.stores.retry import retrying
from tocsin.stores.rows import item_of
from tocsin.stores.sql import bulk
from tocsin.stores.sql.bulk import Change
from tocsin.stores.sql.schedules import SqlSchedules

__all__ = ["Change", "change_many", "create_many", "flush_commits", "schedule_id_for_key",
           "store_pending"]

T = TypeVar("T")

_BULK_TRIES = 3
"""Tries of a bulk write before ``create`` decides. A try fails as a whole when another
writer inserts one of its keys meanwhile (PostgreSQL: the COPY waits for that transaction,
then meets the key); the next try finds the key held and answers it as a held key. Two
writers of an import whose rows repeat keys across files fell back chunk after chunk, each
chunk through ``create`` and then one item at a time: 4 291 rows/s for 202 000 rows."""


def _bulk_tried(write: Callable[[], T]) -> T | None:
    """``write()``, tried up to :data:`_BULK_TRIES` times while it raises
    :class:`StoreError`; None when every try did (an outage: ``create`` retries it)."""
    for _ in range(_BULK_TRIES):
        try:
            return write()
        except StoreError:
            continue
    return None


def create_many(store: Store, items: Sequence[NewSchedule], *,
                now_ms: int) -> list[tuple[Schedule, bool] | ConflictError]:
    """``store.create`` of each item, in one transaction where it can: for each, the
    schedule and whether it is new, or the :class:`~tocsin.errors.ConflictError` of a key
    held by another request (that item alone is left out). By the bulk path when every item
    has an idempotency key; retried while the store is unavailable (safe: every item is
    keyed)."""
    if _bulk(store, items):
        keyed = store  # narrowed for the closure
        done = _bulk_tried(lambda: bulk.create_keyed(keyed, items, now_ms=now_ms))
        if done is not None:
            return done
    return _created_by_create(store, items, now_ms=now_ms)


def _created_by_create(store: Store, items: Sequence[NewSchedule], *,
                       now_ms: int) -> list[tuple[Schedule, bool] | ConflictError]:
    """:func:`create_many` once the bulk path has failed: ``store.create``, and on a
    conflict the halves again by :func:`create_many`."""
    try:
        return list(retrying(lambda: store.create(items, now_ms=now_ms), what="create"))
    except ConflictError as conflict:
        if len(items) == 1:
            return [conflict]
    # One item's conflict refused them all: each half on its own, until only the items
    # that conflict are left out (one conflict in n items: n transactions one by one, about
    # 2 log2(n) in halves).
    half = len(items) // 2
    return [*create_many(store, items[:half], now_ms=now_ms),
            *create_many(store, items[half:], now_ms=now_ms)]


def store_pending(store: Store, rows: Sequence[Sequence[Any]], *, now_ms: int,
                  key_retention_ms: int) -> list[bool | ConflictError]:
    """Store rows made by :func:`~tocsin.stores.rows.pending_values` (an import's, each
    keyed), given their items' ``key_retention_ms``, in one transaction where it can (not
    durable before :func:`flush_commits`): for
    each, whether it was created (True) or its key already held the same request (False),
    or the :class:`~tocsin.errors.ConflictError` of a key held by another request."""
    if isinstance(store, SqlSchedules) and bulk.all_keyed(rows):
        sql = store  # narrowed for the closure
        done = _bulk_tried(lambda: bulk.store_pending(sql, rows, now_ms=now_ms,
                                                      key_retention_ms=key_retention_ms))
        if done is not None:
            return done
    items = [item_of(row, key_retention_ms=key_retention_ms) for row in rows]
    # Not create_many: its bulk path is the one that just failed, every try.
    return [one if isinstance(one, ConflictError) else one[1]
            for one in _created_by_create(store, items, now_ms=now_ms)]


def flush_commits(store: Store) -> None:
    """Make every :func:`store_pending` before this call durable (its transactions commit
    without waiting for the flush on PostgreSQL); retried while the store is unavailable."""
    if isinstance(store, SqlSchedules):
        retrying(lambda: bulk.flush_commits(store), what="flush")


def _bulk(store: Store, items: Sequence[NewSchedule]) -> TypeGuard[SqlSchedules]:
    """Whether the items can take the store's bulk keyed create."""
    return isinstance(store, SqlSchedules) and all(
        i.key is not None and not i.overwrite_pending for i in items)


def schedule_id_for_key(store: Store, *, tenant: str, key: str) -> str:
    """The id of ``tenant``'s schedule holding ``key``, or
    :class:`~tocsin.errors.NotFoundError`."""
    if not isinstance(store, SqlSchedules):
        raise TypeError(f"{type(store).__name__} cannot find schedules by key")
    return retrying(lambda: bulk.schedule_id_for_key(store, tenant=tenant, key=key),
                    what="key lookup")


def change_many(store: Store, changes: Sequence[Change]) -> list[Schedule | TocsinError]:
    """``changes`` (cancels and reschedules) in order in one transaction, each with the
    schedule as changed or the error its single call raises; retried while the store is
    unavailable (each change repeats harmlessly)."""
    if not isinstance(store, SqlSchedules):
        raise TypeError(f"{type(store).__name__} cannot batch changes")
    return retrying(lambda: bulk.change_many(store, changes), what="changes")

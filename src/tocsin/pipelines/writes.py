"""The pipelines' writes: through the SQL store's bulk keyed create and batched changes when
it has them (:mod:`tocsin.stores.sql.bulk`), else through the store's ``create``, ``cancel``
and ``reschedule``; and a schedule by key."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeGuard

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


def create_many(store: Store, items: Sequence[NewSchedule], *,
                now_ms: int) -> list[tuple[Schedule, bool] | ConflictError]:
    """``store.create`` of each item, in one transaction where it can: for each, the
    schedule and whether it is new, or the :class:`~tocsin.errors.ConflictError` of a key
    held by another request (that item alone is left out). By the bulk path when every item
    has an idempotency key; retried while the store is unavailable (safe: every item is
    keyed)."""
    if _bulk(store, items):
        try:
            return bulk.create_keyed(store, items, now_ms=now_ms)
        except StoreError:
            pass  # a concurrent insert of one of the keys (or an outage): create decides
    try:
        return list(retrying(lambda: store.create(items, now_ms=now_ms), what="create"))
    except ConflictError as conflict:
        if len(items) == 1:
            return [conflict]
    # One item's conflict refused them all: each on its own, so only that one is left out.
    return [one for item in items for one in create_many(store, [item], now_ms=now_ms)]


def store_pending(store: Store, rows: Sequence[Sequence[Any]], *, now_ms: int,
                  key_retention_ms: int) -> list[bool | ConflictError]:
    """Store rows made by :func:`~tocsin.stores.rows.pending_values` (an import's, each
    keyed), given their items' ``key_retention_ms``, in one transaction where it can (not
    durable before :func:`flush_commits`): for
    each, whether it was created (True) or its key already held the same request (False),
    or the :class:`~tocsin.errors.ConflictError` of a key held by another request."""
    if isinstance(store, SqlSchedules) and bulk.all_keyed(rows):
        try:
            return bulk.store_pending(store, rows, now_ms=now_ms,
                                      key_retention_ms=key_retention_ms)
        except StoreError:
            pass  # a concurrent insert of one of the keys (or an outage): create decides
    items = [item_of(row, key_retention_ms=key_retention_ms) for row in rows]
    return [one if isinstance(one, ConflictError) else one[1]
            for one in create_many(store, items, now_ms=now_ms)]


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

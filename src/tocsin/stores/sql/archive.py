"""What the archive job (:mod:`tocsin.pipelines.archive`) asks of a SQL store: finished
schedules older than a cutoff with their attempts, and their deletion in small transactions.
Written once over the backend's ``_work``; every read of schedules is a range of
``schedules_finished`` (finish time, id; migration 11), a page at a time."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.stores.rows import DELIVERY_COLUMNS
from tocsin.stores.sql.base import SqlBase, refresh_statistics
from tocsin.stores.sql.stats import FINISHED_AT, finished_rows

__all__ = ["ARCHIVE_COLUMNS", "archived_deliveries", "delete_archived", "finished_between",
           "first_finished"]

ARCHIVE_COLUMNS = (
    "id, tenant, channel, payload, payload_kind, headers, due_ms, bucket, status, attempts, "
    "created_ms, delivered_ms, last_error, key, ordering_key, policy, recurring_id, firing_ms, "
    f"labels, {FINISHED_AT}"
)
"""A finished schedule as archived; the last column is when it finished."""


def first_finished(store: SqlBase) -> int | None:
    """When the earliest finished schedule finished (None: none has). Refreshes the planner's
    statistics first (PostgreSQL): after a day's changes they may say that few schedules
    finished, and the pages of :func:`finished_between` must each be one index range, not a
    sort of what remains of the span."""
    refresh_statistics(store)
    rows = store._rows(f"SELECT min({FINISHED_AT}) FROM {finished_rows(store._dialect)}")
    return None if not rows or rows[0][0] is None else int(rows[0][0])


def finished_between(store: SqlBase, *, lo_ms: int, hi_ms: int,
                     after: tuple[int, str] | None, limit: int) -> list[tuple[Any, ...]]:
    """Up to ``limit`` finished schedules (``ARCHIVE_COLUMNS``) that finished in
    ``[lo_ms, hi_ms)``, in (finish time, id) order after ``after`` (that pair of the last row
    of the page before); each page is one seek and a read of its own rows."""
    start, args = f"{FINISHED_AT} >= ?", (lo_ms,)  # type: str, tuple[Any, ...]
    if after is not None:
        # The bound on the time alone is what SQLite seeks the index to: given only the
        # pair, it read the index from its start to each page (pages slower the further on).
        start, args = f"{FINISHED_AT} >= ? AND ({FINISHED_AT}, id) > (?, ?)", (after[0], *after)
    return store._rows(
        f"SELECT {ARCHIVE_COLUMNS} FROM {finished_rows(store._dialect)} AND {start} "
        f"AND {FINISHED_AT} < ? ORDER BY {FINISHED_AT}, id LIMIT ?", (*args, hi_ms, limit))


def archived_deliveries(store: SqlBase, ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """The attempt log (``DELIVERY_COLUMNS``) of the schedules ``ids``."""
    if not ids:
        return []
    member, args = store._dialect.member(ids)
    return store._rows(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE schedule_id {member}",
                       args)


def delete_archived(store: SqlBase, ids: Sequence[str], *, cutoff_ms: int) -> tuple[int, int]:
    """Delete the schedules ``ids`` that are still finished before ``cutoff_ms`` (one that was
    re-driven meanwhile stays), with their attempts, in one transaction; how many of each.

    Each row is found by its id: the status and time checks are written so that no planner
    reads them by an index of finished rows instead (which visits every finished row)."""
    if not ids:
        return 0, 0
    d = store._dialect
    member, args = d.member(ids)

    def work(conn: Any) -> tuple[int, int]:
        if d.unflushed:  # a delete lost to a crash is archived again by the next run
            conn.execute(d.unflushed)
        gone = [str(r[0]) for r in conn.execute(d.q(
            f"DELETE FROM schedules WHERE id {member} "
            "AND (status || '') IN ('DELIVERED', 'CANCELLED', 'DEAD', 'EXPIRED') "
            f"AND +{FINISHED_AT} < ? RETURNING id"), (*args, cutoff_ms)).fetchall()]
        if not gone:
            return 0, 0
        member_gone, args_gone = d.member(gone)
        attempts = conn.execute(d.q(f"DELETE FROM deliveries WHERE schedule_id {member_gone}"),
                                args_gone).rowcount
        return len(gone), int(attempts)

    return store._work(work, idempotent=True)

"""What the archive job (:mod:`tocsin.pipelines.archive`) asks of a SQL store: finished
schedules older than a cutoff with their attempts, and their deletion in small transactions.
Written once over the backend's ``_work``; every read is a range of ``schedules_finished``
(migration 9) within a bucket range, in id order."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.stores.rows import DELIVERY_COLUMNS
from tocsin.stores.sql.base import SqlBase
from tocsin.stores.sql.stats import FINISHED_AT

__all__ = ["ARCHIVE_COLUMNS", "archived_deliveries", "delete_archived", "finished_before"]

ARCHIVE_COLUMNS = (
    "id, tenant, channel, payload, payload_kind, headers, due_ms, bucket, status, attempts, "
    "created_ms, delivered_ms, last_error, key, ordering_key, policy, recurring_id, firing_ms, "
    f"{FINISHED_AT}"
)
"""A finished schedule as archived; the last column is when it finished."""
_FINISHED = "status IN ('DELIVERED', 'CANCELLED', 'DEAD')"


def finished_before(store: SqlBase, *, cutoff_ms: int, lo: int, hi: int, after: str,
                    limit: int) -> list[tuple[Any, ...]]:
    """Up to ``limit`` finished schedules (``ARCHIVE_COLUMNS``) of buckets ``lo..hi`` that
    finished before ``cutoff_ms``, in id order after ``after``."""
    return store._rows(
        f"SELECT {ARCHIVE_COLUMNS} FROM schedules WHERE {_FINISHED} AND {FINISHED_AT} < ? "
        "AND bucket BETWEEN ? AND ? AND id > ? ORDER BY id LIMIT ?",
        (cutoff_ms, lo, hi, after, limit))


def archived_deliveries(store: SqlBase, ids: Sequence[str]) -> list[tuple[Any, ...]]:
    """The attempt log (``DELIVERY_COLUMNS``) of the schedules ``ids``."""
    if not ids:
        return []
    return store._rows(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE schedule_id IN "
                       f"({', '.join('?' * len(ids))})", tuple(ids))


def delete_archived(store: SqlBase, ids: Sequence[str], *, cutoff_ms: int) -> tuple[int, int]:
    """Delete the schedules ``ids`` that are still finished before ``cutoff_ms`` (one that was
    re-driven meanwhile stays), with their attempts, in one transaction; how many of each."""
    if not ids:
        return 0, 0
    q, marks = store._dialect.q, ", ".join("?" * len(ids))

    def work(conn: Any) -> tuple[int, int]:
        gone = [str(r[0]) for r in conn.execute(q(
            f"DELETE FROM schedules WHERE id IN ({marks}) AND {_FINISHED} "
            f"AND {FINISHED_AT} < ? RETURNING id"), (*ids, cutoff_ms)).fetchall()]
        if not gone:
            return 0, 0
        attempts = conn.execute(q(f"DELETE FROM deliveries WHERE schedule_id IN "
                                  f"({', '.join('?' * len(gone))})"), gone).rowcount
        return len(gone), int(attempts)

    return store._work(work, idempotent=True)

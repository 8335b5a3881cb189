"""What ``tocsin report`` (:mod:`tocsin.pipelines.report`) reads from a SQL store, written once:
finished schedules and attempts within a time slice, each by a range of one index
(``schedules_finished``, ``deliveries_ended``), and upcoming schedules (a scan of the pending)."""

from __future__ import annotations

from typing import Any

from tocsin.stores.sql.base import SqlBase
from tocsin.stores.sql.stats import FINISHED_AT, finished_rows

__all__ = ["attempts_between", "finished_between", "upcoming_between"]


def finished_between(store: SqlBase, lo_ms: int, hi_ms: int) -> list[tuple[Any, ...]]:
    """``(id, tenant, channel, status, finished_ms)`` of schedules finished in
    ``[lo_ms, hi_ms)``."""
    return store._rows(
        f"SELECT id, tenant, channel, status, {FINISHED_AT} FROM "
        f"{finished_rows(store._dialect)} AND {FINISHED_AT} >= ? AND {FINISHED_AT} < ?",
        (lo_ms, hi_ms))


def attempts_between(store: SqlBase, lo_ms: int, hi_ms: int) -> list[tuple[Any, ...]]:
    """``(delivery_id, schedule_id, tenant, channel, ended_ms, outcome, lateness_ms)`` of the
    attempts that ended in ``[lo_ms, hi_ms)``."""
    return store._rows(
        "SELECT d.delivery_id, d.schedule_id, s.tenant, s.channel, d.ended_ms, d.outcome, "
        "d.lateness_ms FROM deliveries d JOIN schedules s ON s.id = d.schedule_id "
        "WHERE d.ended_ms >= ? AND d.ended_ms < ?", (lo_ms, hi_ms))


def upcoming_between(store: SqlBase, lo_ms: int, hi_ms: int) -> list[tuple[Any, ...]]:
    """``(tenant, channel, next_ms)`` of the PENDING schedules due in ``[lo_ms, hi_ms)``."""
    return store._rows(
        "SELECT tenant, channel, next_ms FROM schedules WHERE status = 'PENDING' "
        "AND next_ms >= ? AND next_ms < ?", (lo_ms, hi_ms))

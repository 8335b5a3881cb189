"""What ``tocsin report`` (:mod:`tocsin.pipelines.report`) reads from a SQL store, written once:
finished schedules and attempts within a time slice, each by a range of one index
(``schedules_finished``, ``deliveries_ended``), and upcoming schedules (a scan of the pending).
Given a label selector's pairs, each row read is kept when its schedule carries them: one
probe of the label index a row (:func:`~tocsin.stores.sql.labels.carrying`), so a report by
label reads what the whole report reads, and no more."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.stores.sql.base import SqlBase
from tocsin.stores.sql.labels import carrying
from tocsin.stores.sql.stats import FINISHED_AT, finished_rows

__all__ = ["attempts_between", "finished_between", "upcoming_between"]


def _kept(labels: Sequence[tuple[str, str]], column: str) -> tuple[str, list[Any]]:
    clauses, args = carrying(labels, tenant=None, column=column)
    return "".join(f" AND {c}" for c in clauses), args


def finished_between(store: SqlBase, lo_ms: int, hi_ms: int,
                     labels: Sequence[tuple[str, str]] = ()) -> list[tuple[Any, ...]]:
    """``(id, tenant, channel, status, finished_ms)`` of schedules finished in
    ``[lo_ms, hi_ms)`` (carrying every one of ``labels``)."""
    kept, args = _kept(labels, "schedules.id")
    return store._rows(
        f"SELECT id, tenant, channel, status, {FINISHED_AT} FROM "
        f"{finished_rows(store._dialect)} AND {FINISHED_AT} >= ? AND {FINISHED_AT} < ?{kept}",
        (lo_ms, hi_ms, *args))


def attempts_between(store: SqlBase, lo_ms: int, hi_ms: int,
                     labels: Sequence[tuple[str, str]] = ()) -> list[tuple[Any, ...]]:
    """``(delivery_id, schedule_id, tenant, channel, ended_ms, outcome, lateness_ms)`` of the
    attempts that ended in ``[lo_ms, hi_ms)`` (of schedules carrying every one of
    ``labels``)."""
    kept, args = _kept(labels, "d.schedule_id")
    return store._rows(
        "SELECT d.delivery_id, d.schedule_id, s.tenant, s.channel, d.ended_ms, d.outcome, "
        "d.lateness_ms FROM deliveries d JOIN schedules s ON s.id = d.schedule_id "
        f"WHERE d.ended_ms >= ? AND d.ended_ms < ?{kept}", (lo_ms, hi_ms, *args))


def upcoming_between(store: SqlBase, lo_ms: int, hi_ms: int,
                     labels: Sequence[tuple[str, str]] = ()) -> list[tuple[Any, ...]]:
    """``(tenant, channel, next_ms)`` of the PENDING schedules due in ``[lo_ms, hi_ms)``
    (carrying every one of ``labels``)."""
    kept, args = _kept(labels, "schedules.id")
    return store._rows(
        "SELECT tenant, channel, next_ms FROM schedules WHERE status = 'PENDING' "
        f"AND next_ms >= ? AND next_ms < ?{kept}", (lo_ms, hi_ms, *args))

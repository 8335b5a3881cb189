"""Bulk cancel and reschedule by predicate (:class:`~tocsin.abc.BulkChangeStore`), written once.

Each chunk is one write transaction: it reads the next ``chunk`` ids of the selection still
waiting or firing (in id order, after the last chunk's), then changes them with the very
compare-and-set of a single cancel or reschedule (``status = 'PENDING'``). A schedule claimed
before that statement runs (CLAIMED, or claimed by a dispatcher between the read and the
change on PostgreSQL, where the change re-checks the row once its lock is free) is left alone
and counted too late: a cancel never races a claim wrongly. Small transactions keep the
dispatcher and the API moving while millions of rows change.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tocsin.abc import BulkChangeStore
from tocsin.domain import BulkResult, Selection
from tocsin.errors import ValidationError
from tocsin.stores.sql.base import SqlBase
from tocsin.stores.sql.labels import rarest_first, selected
from tocsin.stores.sql.outcomes import Outcome, events_of, record_outcomes

__all__ = ["SqlBulkChanges", "selection_where"]

_CANCEL = ("UPDATE schedules SET status = 'CANCELLED', next_ms = ? "
           "WHERE status = 'PENDING' AND id IN ({ids}) "
           "RETURNING id, tenant, channel, attempts, due_ms")
"""A chunk's cancel, returning what each cancelled schedule's outcome event needs."""
_RESCHEDULE = ("UPDATE schedules SET due_ms = coalesce(CAST(? AS BIGINT), due_ms + ?), "
               "next_ms = coalesce(CAST(? AS BIGINT), due_ms + ?) "
               "WHERE status = 'PENDING' AND id IN ({ids})")


def selection_where(selection: Selection) -> tuple[str, list[Any]]:
    """The WHERE clause (``?`` placeholders) and arguments of the schedules ``selection``
    names that are still waiting or firing."""
    where, args = ["status IN ('PENDING', 'CLAIMED')"], []
    for clause, value in (("tenant = ?", selection.tenant), ("channel = ?", selection.channel),
                          ("ordering_key = ?", selection.ordering_key),
                          ("recurring_id = ?", selection.recurring_id),
                          ("due_ms >= ?", selection.due_from_ms),
                          ("due_ms < ?", selection.due_to_ms)):
        if value is not None:
            where.append(clause)
            args.append(value)
    if selection.key_prefix is not None:
        where.append("substr(key, 1, ?) = ?")
        args += [len(selection.key_prefix), selection.key_prefix]
    if selection.buckets is not None:
        where.append("bucket BETWEEN ? AND ?")
        args += list(selection.buckets)
    return " AND ".join(where), args


class SqlBulkChanges(SqlBase, BulkChangeStore):
    """The :class:`~tocsin.abc.BulkChangeStore` role over a backend's ``_work``."""

    def cancel_where(self, selection: Selection, *, now_ms: int, limit: int | None = 10_000,
                     chunk: int = 500) -> BulkResult:
        d, buckets = self._dialect, self.buckets

        def told(conn: Any, rows: list[Any]) -> None:  # outcome events (outcomes.py)
            events: dict[tuple[str, str], str | None] = {}
            found = []
            for sid, tenant, channel, attempts, due_ms in rows:
                if (tenant, channel) not in events:
                    events[(tenant, channel)] = events_of(conn, d, tenant, channel)
                if (target := events[(tenant, channel)]) is not None:
                    found.append(Outcome(sid, tenant, channel, target, "CANCELLED",
                                         int(attempts), None, now_ms, int(due_ms)))
            record_outcomes(conn, d, found, buckets=buckets, now_ms=now_ms)

        return self._change_where(selection, _CANCEL, (now_ms,), limit=limit, chunk=chunk,
                                  returned=told)

    def reschedule_where(self, selection: Selection, *, now_ms: int, due_ms: int | None = None,
                         shift_ms: int | None = None, limit: int | None = 10_000,
                         chunk: int = 500) -> BulkResult:
        if (due_ms is None) == (shift_ms is None):
            raise ValidationError("due_at", "give exactly one of due_at or shift")
        shift = shift_ms or 0
        return self._change_where(selection, _RESCHEDULE, (due_ms, shift, due_ms, shift),
                                  limit=limit, chunk=chunk)

    def _change_where(self, selection: Selection, update: str, values: tuple[Any, ...], *,
                      limit: int | None, chunk: int,
                      returned: Callable[[Any, list[Any]], None] | None = None) -> BulkResult:
        if limit is not None and limit < 1:
            raise ValidationError("limit", "must be at least 1")
        if chunk < 1:
            raise ValidationError("chunk", "must be at least 1")
        where, args = selection_where(selection)
        source, source_args = selected(
            rarest_first(self, selection.labels, tenant=selection.tenant),
            tenant=selection.tenant)
        args = [*source_args, *args]
        q = self._dialect.q
        pick = q(f"SELECT id FROM {source} WHERE {where} AND id > ? ORDER BY id LIMIT ?")
        total, after = BulkResult(matched=0, changed=0, too_late=0, more=False), ""
        while limit is None or total.matched < limit:
            take = chunk if limit is None else min(chunk, limit - total.matched)
            ids, changed = self._tenant_work(
                _chunk(pick, (*args, after, take), update, values, q, returned),
                tenants=frozenset())
            total += BulkResult(matched=len(ids), changed=changed, too_late=len(ids) - changed,
                                more=False)
            if len(ids) < take:
                return total
            after = ids[-1]
        return BulkResult(matched=total.matched, changed=total.changed,
                          too_late=total.too_late, more=True)


def _chunk(pick: str, pick_args: tuple[Any, ...], update: str, values: tuple[Any, ...],
           q: Callable[[str], str], returned: Callable[[Any, list[Any]], None] | None = None,
           ) -> Callable[[Any], tuple[list[str], int]]:
    """One chunk's transaction: the next ids, and how many of them the change took (an
    update with RETURNING hands its rows to ``returned`` in the same transaction)."""

    def work(conn: Any) -> tuple[list[str], int]:
        ids = [str(r[0]) for r in conn.execute(pick, pick_args).fetchall()]
        if not ids:
            return ids, 0
        sql = q(update.format(ids=", ".join("?" * len(ids))))
        if returned is None:
            return ids, int(conn.execute(sql, (*values, *ids)).rowcount)
        rows = conn.execute(sql, (*values, *ids)).fetchall()
        returned(conn, rows)
        return ids, len(rows)

    return work

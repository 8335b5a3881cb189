"""What an operator does (:class:`~tocsin.abc.OperationsStore`), written once: re-drive dead
schedules as a new attempt chain, pause and resume channels."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.abc import OperationsStore, PausedChannel
from tocsin.domain import Schedule, Status
from tocsin.errors import ConflictError, NotFoundError, ValidationError
from tocsin.stores.rows import SCHEDULE_COLUMNS, list_filters, schedule_from_row
from tocsin.stores.sql.base import Dialect, SqlBase, tenant_is
from tocsin.stores.sql.labels import rarest_first, selected

__all__ = ["NOT_HELD_HERE", "SqlOperations", "not_paused"]


def not_paused(d: Dialect) -> str:
    """The claim's predicate for a candidate schedule aliased ``s``: its channel is neither
    paused by an operator nor held by the dispatcher (an open breaker, a full lane). A full
    lane's hold names its dispatcher run (:func:`~tocsin.stores.sql.owners.holder_run`) and
    passes the destination over only in the buckets that run owns: its lane pulls those, and
    the other dispatchers' claims take theirs (one run's hold had kept every other run off the
    destination, whose pulls are fenced to their own buckets). Each test is of the row
    (``d.per_row``), so candidates read in order stay in order."""
    return ("NOT EXISTS (SELECT 1 FROM paused_channels pc "
            f"WHERE pc.tenant = s.tenant AND pc.name = s.channel{d.per_row}) "
            "AND NOT EXISTS (SELECT 1 FROM channel_holds ch "
            "WHERE ch.tenant = s.tenant AND ch.name = s.channel AND (ch.run = '' "
            "OR EXISTS (SELECT 1 FROM bucket_owners o WHERE o.run = ch.run "
            f"AND s.bucket BETWEEN o.bucket_lo AND o.bucket_hi)){d.per_row})")


NOT_HELD_HERE = ("NOT EXISTS (SELECT 1 FROM paused_channels pc "
                 "WHERE pc.tenant = s.tenant AND pc.name = s.channel) "
                 "AND NOT EXISTS (SELECT 1 FROM channel_holds ch "
                 "WHERE ch.tenant = s.tenant AND ch.name = s.channel AND ch.run IN ('', ?))")
""":func:`not_paused` for a destination as a whole, as one dispatcher run (one argument: its
id, or '' for none) sees it: neither paused, nor held by its breaker, nor held by a full lane
of that run (whose puller takes the run's rows of it). A full lane of another run holds the
destination only in that run's buckets, which this run's claims do not reach."""

_REDRIVE = ("UPDATE schedules SET status = 'PENDING', next_ms = ?, chain_base = attempts, "
            "claim_epoch = NULL, claimed_ms = NULL, delivered_ms = NULL, chain_ms = NULL "
            "WHERE (status = 'DEAD' OR status = 'EXPIRED') AND {where} RETURNING {columns}")
MAX_REDRIVE = 100_000
"""The most schedules one re-drive by predicate may send again."""


class SqlOperations(SqlBase, OperationsStore):
    """The :class:`~tocsin.abc.OperationsStore` role over a backend's ``_work``."""

    def redrive(self, schedule_id: str, *, now_ms: int, tenant: str | None = None) -> Schedule:
        d = self._dialect
        sql = d.q(_REDRIVE.format(where=f"id = ? AND {tenant_is()}", columns=SCHEDULE_COLUMNS))

        def work(conn: Any) -> Schedule | None:
            row = conn.execute(sql, (now_ms, schedule_id, tenant, tenant)).fetchone()
            if row is None:
                return None
            _resume_halted(conn, d.q, [(row[1], row[0])])
            return schedule_from_row(row)

        done = self._work(work)
        if done is None:
            found = self._rows(f"SELECT status FROM schedules WHERE id = ? AND {tenant_is()}",
                               (schedule_id, tenant, tenant))
            if not found:
                raise NotFoundError("schedule", schedule_id)
            raise ConflictError(f"schedule {schedule_id} is {found[0][0]}, not DEAD or "
                                "EXPIRED: only dead and expired schedules can be re-driven",
                                ident=schedule_id,
                                status=found[0][0])
        return done

    def redrive_where(self, *, now_ms: int, tenant: str | None = None,
                      channel: str | None = None, due_from_ms: int | None = None,
                      due_to_ms: int | None = None, limit: int = 10_000,
                      chunk: int = 500, status: Status = Status.DEAD,
                      labels: Sequence[tuple[str, str]] = ()) -> int:
        if not 1 <= limit <= MAX_REDRIVE:
            raise ValidationError("limit", f"must be between 1 and {MAX_REDRIVE}")
        if status not in (Status.DEAD, Status.EXPIRED):
            raise ValidationError("status", "must be DEAD or EXPIRED")
        d = self._dialect
        where, args = list_filters("?", status=status, channel=channel,
                                   due_from_ms=due_from_ms, due_to_ms=due_to_ms,
                                   after_id=None, tenant=tenant)
        source, source_args = selected(rarest_first(self, labels, tenant=tenant), tenant=tenant)
        args = [*source_args, *args]
        sql = d.q(_REDRIVE.format(
            where=f"id IN (SELECT id FROM {source} WHERE {where} ORDER BY id LIMIT ?)",
            columns="id, tenant"))
        done = 0
        while done < limit:
            take = min(chunk, limit - done)

            def work(conn: Any, take: int = take) -> int:
                rows = conn.execute(sql, (now_ms, *args, take)).fetchall()
                _resume_halted(conn, d.q, [(r[1], r[0]) for r in rows])
                return len(rows)

            got = self._work(work)
            done += got
            if got < take:
                break
        return done

    def pause_channel(self, name: str, *, tenant: str, now_ms: int) -> PausedChannel:
        if not self._rows("SELECT 1 FROM channels WHERE tenant = ? AND name = ?",
                          (tenant, name)):
            raise NotFoundError("channel", name)
        self._changed("INSERT INTO paused_channels VALUES (?, ?, ?) ON CONFLICT DO NOTHING",
                      (tenant, name, now_ms), idempotent=True)
        rows = self._rows("SELECT paused_ms FROM paused_channels WHERE tenant = ? AND name = ?",
                          (tenant, name))
        return PausedChannel(tenant, name, int(rows[0][0]) if rows else now_ms)

    def resume_channel(self, name: str, *, tenant: str) -> bool:
        return bool(self._changed("DELETE FROM paused_channels WHERE tenant = ? AND name = ?",
                                  (tenant, name), idempotent=True))

    def paused_channels(self, *, tenant: str | None = None) -> list[PausedChannel]:
        rows = self._rows(f"SELECT tenant, name, paused_ms FROM paused_channels "
                          f"WHERE {tenant_is()} ORDER BY tenant, name", (tenant, tenant))
        return [PausedChannel(r[0], r[1], int(r[2])) for r in rows]


def _resume_halted(conn: Any, q: Any, rows: list[tuple[str, str]]) -> None:
    """Resume the ordering keys the re-driven schedules (``(tenant, id)``) halted."""
    for tenant, schedule_id in rows:
        conn.execute(q("DELETE FROM halted_keys WHERE tenant = ? AND schedule_id = ?"),
                     (tenant, schedule_id))

"""Schedules as clients see them (:class:`~tocsin.abc.ScheduleStore`), written once."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from tocsin.abc import HaltedKey, ScheduleStore
from tocsin.domain import Delivery, NewSchedule, PayloadKind, Schedule, ScheduleOrder, Status
from tocsin.errors import ConflictError, NotFoundError, ValidationError
from tocsin.sealing import seal_payload
from tocsin.stores.rows import (
    DELIVERY_COLUMNS,
    INSERT_ARITY,
    INSERT_COLUMNS,
    SCHEDULE_COLUMNS,
    KeyDecision,
    delivery_from_row,
    insert_values,
    key_decision,
    list_filters,
    schedule_from_row,
    schedule_from_values,
)
from tocsin.stores.sql.base import SqlBase, tenant_is
from tocsin.stores.sql.labels import rarest_first, selected
from tocsin.stores.sql.outcomes import Outcome, events_of, record_outcomes

__all__ = ["CANCEL", "INSERT", "SqlSchedules", "cancel_args", "reschedule_args",
           "reschedule_sql", "too_late"]

INSERT = f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES ({', '.join('?' * INSERT_ARITY)})"
"""One new schedule (``insert_values`` values)."""


_ORDER_BY = {
    ScheduleOrder.ID: "id",
    ScheduleOrder.DUE: "due_ms DESC, id DESC",
    ScheduleOrder.ACTIVITY: "COALESCE(delivered_ms, NULLIF(claimed_ms, 0), created_ms) DESC, "
                            "id DESC",
}
"""Each order as SQL. The dashboard asks for the first 200; a store of millions sorts them
in a scan (no index serves the two descending orders)."""


CANCEL = ("UPDATE schedules SET status = 'CANCELLED', next_ms = ? "
          f"WHERE id = ? AND status = 'PENDING' AND {tenant_is()} RETURNING {SCHEDULE_COLUMNS}")
"""A cancel: the compare-and-set a claim races (``cancel_args``)."""


def cancel_args(schedule_id: str, *, now_ms: int, tenant: str | None) -> tuple[Any, ...]:
    """The parameters of :data:`CANCEL`."""
    return now_ms, schedule_id, tenant, tenant


def reschedule_sql(blob: str) -> str:
    """A reschedule of a PENDING schedule (``reschedule_args``); ``blob`` is the dialect's
    byte string type."""
    return ("UPDATE schedules SET due_ms = coalesce(CAST(? AS BIGINT), due_ms), "
            "next_ms = coalesce(CAST(? AS BIGINT), next_ms), "
            f"payload = coalesce(CAST(? AS {blob}), payload), "
            "payload_kind = coalesce(CAST(? AS TEXT), payload_kind), "
            "headers = coalesce(CAST(? AS TEXT), headers) "
            f"WHERE id = ? AND status = 'PENDING' AND {tenant_is()} "
            f"RETURNING {SCHEDULE_COLUMNS}")


def reschedule_args(schedule_id: str, *, due_ms: int | None, payload: bytes | None,
                    payload_kind: PayloadKind | None, headers: dict[str, str] | None,
                    tenant: str | None) -> tuple[Any, ...]:
    """The parameters of :func:`reschedule_sql`."""
    return (due_ms, due_ms, None if payload is None else seal_payload(payload),
            payload_kind.value if payload_kind else None,
            None if headers is None else json.dumps(headers), schedule_id, tenant, tenant)


def too_late(schedule_id: str, status: Status, verb: str) -> ConflictError:
    """The answer to a cancel or a change of a schedule no longer PENDING."""
    return ConflictError(f"schedule {schedule_id} is {status.value}: too late to {verb}",
                         status=status.value, ident=schedule_id)


class SqlSchedules(SqlBase, ScheduleStore):
    """The :class:`~tocsin.abc.ScheduleStore` role over a backend's ``_work``."""

    def create(self, items: Sequence[NewSchedule], *, now_ms: int) -> list[tuple[Schedule, bool]]:
        buckets = self.buckets

        def work(conn: Any) -> list[tuple[Schedule, bool]]:
            out: list[tuple[Schedule, bool]] = []
            plain: list[tuple[Any, ...]] = []
            for item in items:
                values = insert_values(item, buckets=buckets, now_ms=now_ms)
                if item.key is None:
                    plain.append(values)
                    out.append((schedule_from_values(values, item), True))
                else:
                    out.append(self._create_keyed(conn, item, values, now_ms))
            if plain:
                self._insert_many(conn, f"schedules ({INSERT_COLUMNS})", plain)
            return out

        return self._tenant_work(work, tenants=frozenset(item.tenant for item in items))

    def _create_keyed(self, conn: Any, item: NewSchedule, values: tuple[Any, ...],
                      now_ms: int) -> tuple[Schedule, bool]:
        """Insert a keyed item, or apply the reused-key rule to the schedule holding its key
        in its tenant. ON CONFLICT waits for a concurrent insert of the same key, then the
        SELECT sees that row: two racing creates of one key resolve like a repeat."""
        d = self._dialect
        for _ in range(2):
            if conn.execute(d.q(f"{INSERT} ON CONFLICT (tenant, key) WHERE key IS NOT NULL "
                                "DO NOTHING"), values).rowcount:
                return schedule_from_values(values, item), True
            row = conn.execute(d.q(
                f"SELECT {SCHEDULE_COLUMNS}, fingerprint FROM schedules "
                f"WHERE tenant = ? AND key = ?{d.lock_row}"), (item.tenant, item.key)).fetchone()
            assert row is not None
            existing = schedule_from_row(row[:-1])
            decision = key_decision(item, existing, row[-1], now_ms=now_ms)
            if decision is KeyDecision.REPEAT:
                return existing, False
            if decision is KeyDecision.OVERWRITE:
                updated = conn.execute(d.q(
                    "UPDATE schedules SET payload = ?, payload_kind = ?, headers = ?, "
                    "fingerprint = ? WHERE id = ? AND status = 'PENDING' "
                    f"RETURNING {SCHEDULE_COLUMNS}"),
                    (seal_payload(item.payload), item.payload_kind.value,
                     json.dumps(item.headers),
                     item.fingerprint(), existing.id)).fetchone()
                assert updated is not None
                return schedule_from_row(updated), False
            conn.execute(d.q("UPDATE schedules SET key = NULL WHERE id = ?"), (existing.id,))
        raise ConflictError(f"key {item.key!r} is contended; try again", ident=None)

    def get(self, schedule_id: str, *, tenant: str | None = None) -> Schedule:
        rows = self._rows(f"SELECT {SCHEDULE_COLUMNS} FROM schedules "
                          f"WHERE id = ? AND {tenant_is()}", (schedule_id, tenant, tenant))
        if not rows:
            raise NotFoundError("schedule", schedule_id)
        return schedule_from_row(rows[0])

    def list_schedules(
        self,
        *,
        status: Status | None = None,
        channel: str | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        after_id: str | None = None,
        limit: int = 100,
        tenant: str | None = None,
        key: str | None = None,
        order: ScheduleOrder = ScheduleOrder.ID,
        labels: Sequence[tuple[str, str]] = (),
    ) -> list[Schedule]:
        if after_id is not None and order is not ScheduleOrder.ID:
            raise ValidationError("after_id", "pages go on after an id only in id order")
        where, args = list_filters("?", status=status, channel=channel, due_from_ms=due_from_ms,
                                   due_to_ms=due_to_ms, after_id=after_id, tenant=tenant,
                                   key=key)
        source, source_args = selected(rarest_first(self, labels, tenant=tenant), tenant=tenant)
        rows = self._rows(f"SELECT {SCHEDULE_COLUMNS} FROM {source} WHERE {where} "
                          f"ORDER BY {_ORDER_BY[order]} LIMIT ?", (*source_args, *args, limit))
        return [schedule_from_row(r) for r in rows]

    def cancel(self, schedule_id: str, *, now_ms: int, tenant: str | None = None) -> Schedule:
        d, buckets = self._dialect, self.buckets

        def work(conn: Any) -> Any:
            row = conn.execute(d.q(CANCEL), cancel_args(schedule_id, now_ms=now_ms,
                                                         tenant=tenant)).fetchone()
            if row is not None and (events := events_of(conn, d, row[1], row[2])):
                record_outcomes(conn, d, [Outcome(
                    row[0], row[1], row[2], events, "CANCELLED", int(row[10]), None, now_ms,
                    int(row[6]))], buckets=buckets, now_ms=now_ms)
            return row

        row = self._tenant_work(work, tenants=frozenset())
        if row is not None:
            return schedule_from_row(row)
        raise too_late(schedule_id, self.get(schedule_id, tenant=tenant).status, "cancel")

    def reschedule(self, schedule_id: str, *, now_ms: int, due_ms: int | None = None,
                   payload: bytes | None = None, payload_kind: PayloadKind | None = None,
                   headers: dict[str, str] | None = None,
                   tenant: str | None = None) -> Schedule:
        args = reschedule_args(schedule_id, due_ms=due_ms, payload=payload,
                               payload_kind=payload_kind, headers=headers, tenant=tenant)
        row = self._tenant_work(lambda conn: conn.execute(
            self._dialect.q(reschedule_sql(self._dialect.blob)), args).fetchone(),
            tenants=frozenset())
        if row is not None:
            return schedule_from_row(row)
        raise too_late(schedule_id, self.get(schedule_id, tenant=tenant).status, "change")

    def deliveries(self, schedule_id: str, *,
                   tenant: str | None = None) -> list[Delivery]:
        d = self._dialect

        def work(conn: Any) -> list[Any] | None:
            if tenant is not None and conn.execute(
                    d.q("SELECT 1 FROM schedules WHERE id = ? AND tenant = ?"),
                    (schedule_id, tenant)).fetchone() is None:
                return None
            return list(conn.execute(d.q(
                f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE schedule_id = ? "
                "ORDER BY started_ms, attempt"), (schedule_id,)).fetchall())

        rows = self._work(work, write=False)
        if rows is None:
            raise NotFoundError("schedule", schedule_id)
        return [delivery_from_row(r) for r in rows]

    def halted_keys(self, *, tenant: str | None = None) -> list[HaltedKey]:
        rows = self._rows(
            "SELECT tenant, ordering_key, schedule_id, halted_ms, reason FROM halted_keys "
            f"WHERE {tenant_is()} ORDER BY halted_ms", (tenant, tenant))
        return [HaltedKey(*r) for r in rows]

    def resume_key(self, *, tenant: str, ordering_key: str) -> None:
        if not self._changed("DELETE FROM halted_keys WHERE tenant = ? AND ordering_key = ?",
                             (tenant, ordering_key), idempotent=True):
            raise NotFoundError("halted ordering key", ordering_key)

    def pending_count(self, *, tenant: str) -> int:
        rows = self._rows(
            # Each part reads a partial index: the tenant's PENDING rows, the CLAIMED ones.
            "SELECT (SELECT count(*) FROM schedules WHERE status = 'PENDING' AND tenant = ?), "
            "(SELECT count(*) FROM schedules WHERE status = 'CLAIMED' AND tenant = ?)",
            (tenant, tenant))
        return int(rows[0][0]) + int(rows[0][1])

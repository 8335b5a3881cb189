"""What the Spark pipelines (:mod:`tocsin.pipelines`) ask of a SQL store beyond its roles: a
schedule by its key, and a bulk create of keyed schedules. Written once over the backend's
``_work``, ``_tenant_work`` and ``_insert_many``.

:func:`create_keyed` is :meth:`~tocsin.abc.ScheduleStore.create` for items that all carry an
idempotency key (every row of an import, every create of the commands topic), with the same
answer for each item, except that an item whose key another request holds is answered with its
:class:`~tocsin.errors.ConflictError` while the others are stored: the keys already stored are
read in one statement per few thousand, the new rows go in by the bulk path (COPY on
PostgreSQL, ``executemany`` on SQLite), and only a key repeated within the items takes the
row-by-row rule of ``create``. After a large create the planner's statistics are refreshed once
they lag far behind the table (:func:`~tocsin.stores.sql.base.refresh_statistics`). A
concurrent insert of one of the keys makes the bulk insert fail as a whole
(:class:`StoreError`): the caller then repeats the items through ``create``.

:func:`change_many` is a run of :meth:`~tocsin.abc.ScheduleStore.cancel` and
``reschedule`` calls (each by id, or by key) in one transaction, in their order, each with
the answer the single call gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from tocsin.domain import NewSchedule, PayloadKind, Schedule, Status
from tocsin.errors import ConflictError, NotFoundError, TocsinError
from tocsin.stores.rows import (
    INSERT_COLUMNS,
    SCHEDULE_COLUMNS,
    insert_values,
    key_decision,
    schedule_from_row,
    schedule_from_values,
)
from tocsin.stores.sql.base import SqlBase, refresh_statistics, tenant_is
from tocsin.stores.sql.schedules import (
    CANCEL,
    SqlSchedules,
    cancel_args,
    reschedule_args,
    reschedule_sql,
    too_late,
)

__all__ = ["Change", "change_many", "create_keyed", "schedule_id_for_key"]

_KEYS = 2_000
"""Keys looked up per statement."""
_LARGE = 500
"""A create of this many items looks whether the planner's statistics need refreshing."""
_KEY = SCHEDULE_COLUMNS.replace(" ", "").split(",").index("key")
"""The position of ``key`` in a row of :data:`SCHEDULE_COLUMNS`."""


class Change(NamedTuple):
    """One cancel (``cancel`` True) or reschedule, of the schedule ``id`` or else of
    ``tenant``'s schedule holding ``key``; ``scope`` limits it to a tenant (None: any)."""

    id: str | None
    key: str | None
    tenant: str
    scope: str | None
    now_ms: int
    cancel: bool
    due_ms: int | None = None
    payload: bytes | None = None
    payload_kind: PayloadKind | None = None
    headers: dict[str, str] | None = None


def change_many(store: SqlBase, changes: Sequence[Change]) -> list[Schedule | TocsinError]:
    """Apply ``changes`` in order in one transaction; for each, the schedule as changed or
    the error the single call raises (:class:`NotFoundError`, a ``ConflictError`` naming the
    status)."""
    d = store._dialect
    cancel, change = d.q(CANCEL), d.q(reschedule_sql(d.blob))
    by_key = d.q("SELECT id FROM schedules WHERE tenant = ? AND key = ?")
    status = d.q(f"SELECT status FROM schedules WHERE id = ? AND {tenant_is()}")

    def one(conn: Any, c: Change) -> Schedule | TocsinError:
        ident = c.id
        if ident is None:
            found = conn.execute(by_key, (c.tenant, c.key)).fetchone()
            if found is None:
                return NotFoundError("schedule", f"key {c.key!r} of tenant {c.tenant!r}")
            ident = str(found[0])
        if c.cancel:
            row = conn.execute(cancel, cancel_args(ident, now_ms=c.now_ms,
                                                   tenant=c.scope)).fetchone()
        else:
            row = conn.execute(change, reschedule_args(
                ident, due_ms=c.due_ms, payload=c.payload, payload_kind=c.payload_kind,
                headers=c.headers, tenant=c.scope)).fetchone()
        if row is not None:
            return schedule_from_row(row)
        now = conn.execute(status, (ident, c.scope, c.scope)).fetchone()
        if now is None:
            return NotFoundError("schedule", ident)
        return too_late(ident, Status(now[0]), "cancel" if c.cancel else "change")

    return store._tenant_work(lambda conn: [one(conn, c) for c in changes],
                              tenants=frozenset())


def schedule_id_for_key(store: SqlBase, *, tenant: str, key: str) -> str:
    """The id of ``tenant``'s schedule holding ``key``, or :class:`NotFoundError`."""
    rows = store._rows("SELECT id FROM schedules WHERE tenant = ? AND key = ?", (tenant, key))
    if not rows:
        raise NotFoundError("schedule", f"key {key!r} of tenant {tenant!r}")
    return str(rows[0][0])


def create_keyed(store: SqlSchedules, items: Sequence[NewSchedule], *,
                 now_ms: int) -> list[tuple[Schedule, bool] | ConflictError]:
    """Store the items (each keyed, none with task-key semantics) in one transaction; for
    each, the schedule with True when newly created, False when its key already held the same
    request, or the :class:`~tocsin.errors.ConflictError` of a key held by a different request
    (that item alone is not stored)."""
    if any(item.key is None or item.overwrite_pending for item in items):
        raise ValueError("create_keyed takes only items with an idempotency key")
    buckets, d = store.buckets, store._dialect

    def work(conn: Any) -> list[tuple[Schedule, bool] | ConflictError]:
        stored: dict[tuple[str, str], tuple[Any, ...]] = {}
        by_tenant: dict[str, list[str]] = {}
        for item in items:
            by_tenant.setdefault(item.tenant, []).append(str(item.key))
        for tenant, keys in by_tenant.items():
            for start in range(0, len(keys), _KEYS):
                member, args = d.member(keys[start:start + _KEYS])
                sql = d.q(f"SELECT {SCHEDULE_COLUMNS}, fingerprint FROM schedules WHERE "
                          f"tenant = ? AND key {member}")
                for row in conn.execute(sql, (tenant, *args)).fetchall():
                    stored[(tenant, row[_KEY])] = tuple(row)
        out: list[tuple[Schedule, bool] | ConflictError | None] = []
        fresh: list[tuple[Any, ...]] = []
        slow: list[tuple[int, NewSchedule]] = []
        seen: set[tuple[str, str]] = set()
        for item in items:
            ident = (item.tenant, str(item.key))
            row = stored.get(ident)
            if row is not None:
                existing = schedule_from_row(row[:-1])
                try:
                    key_decision(item, existing, row[-1], now_ms=now_ms)  # a repeat, or raises
                except ConflictError as conflict:
                    out.append(conflict)
                else:
                    out.append((existing, False))
            elif ident in seen:
                slow.append((len(out), item))  # a key repeated within the items
                out.append(None)
            else:
                seen.add(ident)
                values = insert_values(item, buckets=buckets, now_ms=now_ms)
                fresh.append(values)
                out.append((schedule_from_values(values, item), True))
        if fresh:
            store._insert_many(conn, f"schedules ({INSERT_COLUMNS})", fresh)
        for index, item in slow:
            values = insert_values(item, buckets=buckets, now_ms=now_ms)
            try:
                out[index] = store._create_keyed(conn, item, values, now_ms)
            except ConflictError as conflict:  # raised before any failing statement
                out[index] = conflict
        return [o for o in out if o is not None]

    out = store._tenant_work(work, tenants=frozenset(item.tenant for item in items))
    if len(items) >= _LARGE:
        refresh_statistics(store, when_stale=True)  # the next lookup of keys needs them
    return out

"""What the Spark pipelines (:mod:`tocsin.pipelines`) ask of a SQL store beyond its roles: a
schedule by its key, and a bulk create of keyed schedules. Written once over the backend's
``_work``, ``_tenant_work`` and ``_insert_many``.

:func:`create_keyed` is :meth:`~tocsin.abc.ScheduleStore.create` for items that all carry an
idempotency key (every row of an import, every create of the commands topic), with the same
answer for each item, except that an item whose key another request holds is answered with its
:class:`~tocsin.errors.ConflictError` while the others are stored. The rows are made before
the transaction. On PostgreSQL the rows go in by COPY at once unless the first or last key
is held; when one is, or the COPY meets a held key (rolled back alone), the keys already
stored are read in one statement per few thousand and the new rows go in by COPY; only a key
repeated within the items takes the row-by-row rule of ``create``, and a concurrent insert of
one of the keys makes that COPY fail as a whole (:class:`StoreError`): the caller then
repeats the items through ``create``. On
SQLite (one writer at a time) the rows go in first by ``executemany``, skipping keys already
held, and keys are looked up only when some were. After a large create that looked keys up
the planner's statistics are refreshed once they lag far behind the table
(:func:`~tocsin.stores.sql.base.refresh_statistics`).

:func:`change_many` is a run of :meth:`~tocsin.abc.ScheduleStore.cancel` and
``reschedule`` calls (each by id, or by key) in one transaction, in their order, each with
the answer the single call gives.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import chain
from operator import itemgetter
from typing import Any, NamedTuple

from tocsin.domain import NewSchedule, PayloadKind, Schedule, Status
from tocsin.errors import ConflictError, NotFoundError, TocsinError
from tocsin.ids import new_schedule_ids
from tocsin.stores.rows import (
    INSERT_COLUMNS,
    SCHEDULE_COLUMNS,
    insert_values,
    item_of,
    key_decision,
    schedule_from_row,
    schedule_from_values,
    with_id,
)
from tocsin.stores.sql.base import SqlBase, executemany, refresh_statistics, tenant_is
from tocsin.stores.sql.schedules import (
    CANCEL,
    SqlSchedules,
    cancel_args,
    reschedule_args,
    reschedule_sql,
    too_late,
)

__all__ = ["Change", "all_keyed", "change_many", "create_keyed", "flush_commits",
           "schedule_id_for_key", "store_pending"]

_KEYS = 2_000
"""Keys looked up per statement."""
_PER_STATEMENT = 100
"""Rows inserted by one statement on SQLite (:func:`_bound`)."""
_LARGE = 500
"""A create of this many items looks whether the planner's statistics need refreshing."""
_KEY = SCHEDULE_COLUMNS.replace(" ", "").split(",").index("key")
"""The position of ``key`` in a row of :data:`SCHEDULE_COLUMNS`."""
_INSERT_NAMES = INSERT_COLUMNS.replace(" ", "").split(",")
_KEY_AT, _ORDERING_AT, _PAYLOAD_AT = (_INSERT_NAMES.index(name)
                                      for name in ("key", "ordering_key", "payload"))
"""The positions of ``key``, ``ordering_key`` and ``payload`` in INSERT values."""
_BY_KEY = itemgetter(_KEY_AT)
_MAYBE_NULL = frozenset(_INSERT_NAMES.index(name) for name in (
    "key", "fingerprint", "ordering_key", "policy", "recurring_id", "firing_ms", "terms",
    "labels"))
"""The INSERT values that may be None."""


def _tenant_key(values: Sequence[Any]) -> tuple[str, str]:
    """INSERT values' tenant and key."""
    return values[1], values[_KEY_AT]


def _bound(values: Sequence[Sequence[Any]]) -> list[tuple[str, list[tuple[Any, ...]]]]:
    """An INSERT of ``values`` on SQLite, skipping held keys: statements, each with the rows
    ``executemany`` runs it for.

    :data:`_PER_STATEMENT` rows to a statement: SQLite opens a cursor on the table and on
    each of its 13 indexes, and ends the statement, once per execution (callgrind, 20 000
    import rows: 59 000 -> 29 000 instructions a row). No value is None or ``bytes``: a
    column None in every row is left out (NULL all the same), and the payload is a
    ``bytearray`` (a BLOB all the same). Python's sqlite3 module binds text, numbers and
    bytearrays as they are, but looks an adapter up for any other value, through two failed
    attribute lookups that each format an error message (an import row's four None and its
    payload: 16 500 of 77 000 instructions)."""
    given = [at for at in range(len(_INSERT_NAMES)) if at != _PAYLOAD_AT and (
        at not in _MAYBE_NULL or any(v[at] is not None for v in values))]
    columns = ", ".join([_INSERT_NAMES[at] for at in given] + ["payload"])
    pick = itemgetter(*given)
    rows = [(*pick(v), bytearray(v[_PAYLOAD_AT])) for v in values]
    one = f"({', '.join('?' * (len(given) + 1))})"

    def insert(count: int) -> str:
        return (f"INSERT INTO schedules ({columns}) VALUES {', '.join([one] * count)} "
                "ON CONFLICT (tenant, key) WHERE key IS NOT NULL DO NOTHING")

    whole = len(rows) - len(rows) % _PER_STATEMENT
    out = []
    if whole:
        out.append((insert(_PER_STATEMENT), [
            tuple(chain.from_iterable(rows[start:start + _PER_STATEMENT]))
            for start in range(0, whole, _PER_STATEMENT)]))
    if whole < len(rows):
        out.append((insert(1), rows[whole:]))
    return out


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
    out, values = _store_keyed(store, items, now_ms=now_ms)
    return [(schedule_from_values(values[index], item), True) if answer is None else answer
            for index, (item, answer) in enumerate(zip(items, out, strict=True))]


def store_pending(store: SqlSchedules, rows: Sequence[Sequence[Any]], *, now_ms: int,
                  key_retention_ms: int) -> list[bool | ConflictError]:
    """:func:`create_keyed` of rows made by :func:`~tocsin.stores.rows.pending_values`
    (each keyed), given their items' ``key_retention_ms``: an import's rows, built from its
    columns. Each gets its id and creation time here. Only whether each was created (True)
    or its key already held the same request (False), or the conflict: an import needs no
    schedule back, and making one costs a few microseconds a row.

    The transaction commits without waiting for the WAL flush (PostgreSQL): the import
    calls :func:`flush_commits` once at the end of each Spark task, before the task reports
    its rows, so they are durable when ``tocsin import`` reports success, as before. COPY
    of 100 000 rows in one connection, per row of wall time: 11.1-16.5 us waiting for each
    chunk's flush, 9.5-10.4 us not."""
    if not all_keyed(rows):
        raise ValueError("store_pending takes only rows with an idempotency key")
    buckets = store.buckets
    values = [with_id(row, new_id, buckets=buckets, now_ms=now_ms)
              for row, new_id in zip(rows, new_schedule_ids(now_ms, len(rows)), strict=True)]
    out = _store_values(store, values, now_ms=now_ms, item_at=lambda index: item_of(
        rows[index], key_retention_ms=key_retention_ms), flush=False)
    return _created(out)


def flush_commits(store: SqlSchedules) -> None:
    """Make every :func:`store_pending` before this call durable."""
    store._flush_commits()


def all_keyed(rows: Sequence[Sequence[Any]]) -> bool:
    """Whether every row (INSERT values, or :func:`~tocsin.stores.rows.pending_values`)
    has a key: what :func:`store_pending` takes."""
    return all(row[_KEY_AT] is not None for row in rows)


def _created(out: Sequence[tuple[Schedule, bool] | ConflictError | None],
             ) -> list[bool | ConflictError]:
    return [True if answer is None else answer if isinstance(answer, ConflictError)
            else answer[1] for answer in out]


def _store_keyed(store: SqlSchedules, items: Sequence[NewSchedule], *, now_ms: int,
                 ) -> tuple[list[tuple[Schedule, bool] | ConflictError | None],
                            list[tuple[Any, ...]]]:
    """Store the items; each one's answer (None: created now) and row."""
    if any(item.key is None or item.overwrite_pending for item in items):
        raise ValueError("create_keyed takes only items with an idempotency key")
    buckets = store.buckets
    # Each item's row, made before the transaction: the write lock is held for the store's
    # work alone (on SQLite, the other writers of an import wait for it).
    values = [insert_values(item, buckets=buckets, now_ms=now_ms, new_id=new_id)
              for item, new_id in zip(items, new_schedule_ids(now_ms, len(items)), strict=True)]
    return _store_values(store, values, now_ms=now_ms, item_at=items.__getitem__), values


def _store_values(store: SqlSchedules, values: Sequence[tuple[Any, ...]], *, now_ms: int,
                  item_at: Callable[[int], NewSchedule], flush: bool = True,
                  ) -> list[tuple[Schedule, bool] | ConflictError | None]:
    """Store the rows ``values`` (INSERT values, each keyed, none with task-key semantics);
    each one's answer (None: created now). ``item_at``: the item of a row, asked only for a
    row whose key is held or repeated. ``flush``: as ``_tenant_work``'s."""
    if not values:
        return []
    d = store._dialect
    # In the order of their keys, so that each page of the key index is read and changed
    # once per chunk (in the items' order, keys given by the client, or a delay's derived
    # keys, land on any page, and a page read for one key is gone before the next on it).
    # Not when any has an ordering key: the insert order is its enqueue order. Rows of one
    # tenant by their key alone: a string's comparison, not a pair's (a chunk of 10 000
    # derived keys in digest order: 0.58 -> 0.19 us a row).
    tenants = frozenset(map(itemgetter(1), values))
    if any(v[_ORDERING_AT] is not None for v in values):
        in_order: Sequence[tuple[Any, ...]] = values
    else:
        in_order = sorted(values, key=_BY_KEY if len(tenants) == 1 else _tenant_key)

    # SQLite: made before the transaction, as the values are.
    first = _bound(in_order) if d.insert_first else []

    def stored_rows(conn: Any, indexes: Sequence[int]) -> dict[tuple[str, str], tuple[Any, ...]]:
        """The stored rows (and fingerprints) holding the keys of these items."""
        stored: dict[tuple[str, str], tuple[Any, ...]] = {}
        by_tenant: dict[str, list[str]] = {}
        for index in indexes:
            by_tenant.setdefault(values[index][1], []).append(values[index][_KEY_AT])
        for tenant, keys in by_tenant.items():
            for start in range(0, len(keys), _KEYS):
                member, args = d.member(keys[start:start + _KEYS])
                sql = d.q(f"SELECT {SCHEDULE_COLUMNS}, fingerprint FROM schedules WHERE "
                          f"tenant = ? AND key {member}")
                for row in conn.execute(sql, (tenant, *args)).fetchall():
                    stored[(tenant, row[_KEY])] = tuple(row)
        return stored

    def inserted(conn: Any) -> set[str]:
        """The ids of the items just inserted."""
        ids = [v[0] for v in values]
        found: set[str] = set()
        for start in range(0, len(ids), _KEYS):
            member, args = d.member(ids[start:start + _KEYS])
            found.update(row[0] for row in conn.execute(
                d.q(f"SELECT id FROM schedules WHERE id {member}"), args).fetchall())
        return found

    looked_up = False

    def work(conn: Any) -> list[tuple[Schedule, bool] | ConflictError | None]:
        nonlocal looked_up
        # None: stored now (its schedule is made after the transaction).
        out: list[tuple[Schedule, bool] | ConflictError | None] = [None] * len(values)
        held: Sequence[int] = range(len(values))
        fresh: list[tuple[Any, ...]] = []
        slow: list[int] = []
        if d.insert_first:
            # Every item whose key is free goes in; a key held (by a schedule stored before,
            # or by an earlier item) is then answered as the lookup below answers it.
            if sum(executemany(conn, sql, rows) for sql, rows in first) == len(values):
                return out
            stored_ids = inserted(conn)
            held = [index for index in held if values[index][0] not in stored_ids]
        elif not stored_rows(conn, [0, len(values) - 1]) and store._insert_new(
                conn, f"schedules ({INSERT_COLUMNS})", in_order):
            # Neither the first nor the last key is held (a re-run holds them all): the COPY
            # went in whole, with no lookup of every key (PostgreSQL: 3 us a row of the
            # writer's, 1 of the server's).
            return out
        looked_up = True
        stored = stored_rows(conn, held)
        seen: set[tuple[str, str]] = set()
        for index in held:
            ident = (values[index][1], values[index][_KEY_AT])
            row = stored.get(ident)
            if row is not None:
                existing = schedule_from_row(row[:-1])
                try:
                    key_decision(item_at(index), existing, row[-1],
                                 now_ms=now_ms)  # a repeat, or raises
                except ConflictError as conflict:
                    out[index] = conflict
                else:
                    out[index] = (existing, False)
            elif ident in seen:
                slow.append(index)  # a key repeated within the items
            else:
                seen.add(ident)
                fresh.append(values[index])
        if fresh:
            if in_order is not values:
                fresh.sort(key=_tenant_key)
            store._insert_many(conn, f"schedules ({INSERT_COLUMNS})", fresh)
        for index in slow:
            try:
                out[index] = store._create_keyed(conn, item_at(index), values[index], now_ms)
            except ConflictError as conflict:  # raised before any failing statement
                out[index] = conflict
        return out

    out = store._tenant_work(work, tenants=tenants, flush=flush)
    if looked_up and len(values) >= _LARGE:
        # The next lookup of keys needs them. Not after a COPY that went in whole: a load of
        # new keys looks none up, and ANALYZE, at each doubling of the table, took 1.3 s of
        # a 300 000-row load's 11.5 (the import refreshes them once it is done).
        refresh_statistics(store, when_stale=True)
    return out

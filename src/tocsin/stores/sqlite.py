"""SQLite store: the embedded default. One file in WAL mode, shared by the API and the
dispatcher's processes; every write is one ``BEGIN IMMEDIATE`` transaction."""

from __future__ import annotations

import builtins
import fcntl
import json
import os
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from operator import itemgetter
from pathlib import Path
from typing import Any, TypeVar

from tocsin.abc import ClaimedRow, HaltedKey
from tocsin.domain import Ack, ChannelSpec, Delivery, NewSchedule, PayloadKind, Schedule, Status
from tocsin.errors import ConflictError, NotFoundError, StoreError
from tocsin.stores.rows import (
    CLAIM_COLUMNS,
    COUNTS_SQL,
    DELIVERY_COLUMNS,
    INSERT_ARITY,
    INSERT_COLUMNS,
    SCHEDULE_COLUMNS,
    KeyDecision,
    channel_from_row,
    claimed_from_row,
    dead_letter_item,
    delivery_from_row,
    delivery_values,
    earliest,
    head_of_key,
    insert_values,
    key_decision,
    list_filters,
    migrations,
    schedule_from_row,
    schedule_from_values,
    status_counts,
)
from tocsin.stores.shared import (
    SQLITE,
    RecurringAndPolicies,
    all_relaxed,
    claim_throttled,
    return_tokens,
    throttled_next_ms,
)

__all__ = ["SQLiteStore"]

T = TypeVar("T")
_INSERT = f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES ({', '.join('?' * INSERT_ARITY)})"
_HEAD = head_of_key("rowid")  # the enqueue sequence is SQLite's rowid

SCHEMA_VERSION = 1
WAL_CHECKPOINT_PAGES = 10_000
"""Copy the WAL back into the database once it holds this many pages (~40 MB), not SQLite's
default 1 000: a dispatch batch rewrites the same hot pages many times, and each checkpoint,
run by whichever writer crosses the mark while it holds the write lock, copied them again. A
200 000-row drain went from ~13 000/s to ~16 000/s. Much larger WALs make every page lookup
slower (readers search the WAL index), so the WAL is kept bounded."""
_BY_NEXT = itemgetter(11, 0)  # (next_ms, id) of a claim row with next_ms appended


class SQLiteStore(RecurringAndPolicies):
    """A :class:`~tocsin.abc.Store` in one SQLite file (``:memory:`` for a per-process fake)."""

    _dialect = SQLITE

    def __init__(self, path: str | Path, *, buckets: int = 64) -> None:
        path = str(path)
        if path == ":memory:":
            self._target = f"file:tocsin-{uuid.uuid4().hex}?mode=memory&cache=shared"
            self._uri = True
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            self._target, self._uri = path, False
        self.path = path
        self._local = threading.local()
        self._thread_lock = threading.Lock()
        self._lock_fd: int | None = None
        self._lock_pid = 0
        self._keepalive = self._connect()  # keeps a shared in-memory database alive
        if not self._uri:
            self._enable_wal(self._keepalive)
        self._migrate(buckets)

    # -- plumbing --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self._target, uri=self._uri, timeout=60, isolation_level=None,
                               check_same_thread=False)
        conn.execute("PRAGMA busy_timeout = 60000")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        return conn

    def _enable_wal(self, conn: sqlite3.Connection) -> None:
        """Switch the file to WAL (it stays so for every later connection). On a new file
        several processes may try at once; the switch needs the database to itself and SQLite
        answers "locked" at once rather than waiting, so openers queue on the writer lock and
        retry while a reader of another process holds the file."""
        deadline = time.monotonic() + 60
        with self._writer():
            while True:
                try:
                    conn.execute("PRAGMA journal_mode = WAL").fetchone()
                    return
                except sqlite3.OperationalError as exc:
                    if "locked" not in str(exc) or time.monotonic() > deadline:
                        raise StoreError(f"sqlite {self.path}: {exc}") from exc
                time.sleep(0.02)

    @property
    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = self._connect()
            self._local.durable = False  # _connect sets NORMAL
        return conn

    @contextmanager
    def _writer(self) -> Iterator[None]:
        """Queue writers of every process on a kernel lock beside the database: a blocked
        writer wakes the moment the lock is free, where SQLite's busy handler would sleep and
        poll (tens of milliseconds per wait when executors contend)."""
        if self._uri:
            yield
            return
        with self._thread_lock:
            if self._lock_fd is None or self._lock_pid != os.getpid():
                self._lock_fd = os.open(f"{self.path}.writer-lock", os.O_RDWR | os.O_CREAT, 0o644)
                self._lock_pid = os.getpid()
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)

    @contextmanager
    def _tx(self, *, durable: bool | None = None) -> Iterator[sqlite3.Connection]:
        """One write transaction. ``durable`` (a tenant's write): True commits with
        ``synchronous = FULL``, False with ``NORMAL``; None (the dispatcher's own writes,
        which a crash only makes repeat) keeps the connection's level."""
        with self._writer(), self._tx_unlocked(durable) as conn:
            yield conn

    @contextmanager
    def _tx_unlocked(self, durable: bool | None = None) -> Iterator[sqlite3.Connection]:
        conn = self._conn
        if durable is not None and getattr(self._local, "durable", None) is not durable:
            # SQLite refuses to change the level inside a transaction: set it before BEGIN.
            conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
            self._local.durable = durable
        try:
            conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite {self.path}: {exc}") from exc
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException as exc:
            if conn.in_transaction:  # SQLite may already have rolled back (e.g. disk full)
                conn.execute("ROLLBACK")
            if isinstance(exc, sqlite3.Error):
                raise StoreError(f"sqlite {self.path}: {exc}") from exc
            raise

    def _work(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        if not write:
            try:
                return fn(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite {self.path}: {exc}") from exc
        with self._tx() as conn:
            return fn(conn)

    def _migrate(self, buckets: int) -> None:
        with self._tx() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            row = conn.execute("SELECT v FROM meta WHERE k = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            for number, script in migrations("sqlite"):
                if number > version:
                    for statement in script.split(";"):
                        if statement.strip():
                            conn.execute(statement)
                    version = number
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)",
                         (str(version),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('buckets', ?)", (str(buckets),))
            conn.execute("INSERT OR IGNORE INTO meta VALUES ('epoch', '0')")
            self.buckets = int(conn.execute("SELECT v FROM meta WHERE k = 'buckets'").fetchone()[0])
            self.schema_version = version

    def close(self) -> None:
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
        self._keepalive.close()
        if self._lock_fd is not None and self._lock_pid == os.getpid():
            os.close(self._lock_fd)
            self._lock_fd = None

    # -- schedules -------------------------------------------------------------------------

    def create(self, items: Sequence[NewSchedule], *, now_ms: int) -> list[tuple[Schedule, bool]]:
        out: list[tuple[Schedule, bool]] = []
        plain: list[tuple[Any, ...]] = []
        relaxed = all_relaxed(self._conn, SQLITE, {item.tenant for item in items})
        with self._tx(durable=not relaxed) as conn:
            for item in items:
                if item.key is not None:
                    out.append(self._create_keyed(conn, item, now_ms))
                    continue
                values = insert_values(item, buckets=self.buckets, now_ms=now_ms)
                plain.append(values)
                out.append((schedule_from_values(values, item), True))
            if plain:
                conn.executemany(_INSERT, plain)
        return out

    def _create_keyed(self, conn: sqlite3.Connection, item: NewSchedule,
                      now_ms: int) -> tuple[Schedule, bool]:
        row = conn.execute(f"SELECT {SCHEDULE_COLUMNS}, fingerprint FROM schedules "
                           "WHERE tenant = ? AND key = ?", (item.tenant, item.key)).fetchone()
        if row is not None:
            existing = schedule_from_row(row[:-1])
            decision = key_decision(item, existing, row[-1], now_ms=now_ms)
            if decision is KeyDecision.REPEAT:
                return existing, False
            if decision is KeyDecision.OVERWRITE:
                updated = conn.execute(
                    "UPDATE schedules SET payload = ?, payload_kind = ?, headers = ?, "
                    "fingerprint = ? WHERE id = ? AND status = 'PENDING' "
                    f"RETURNING {SCHEDULE_COLUMNS}",
                    (item.payload, item.payload_kind.value, json.dumps(item.headers),
                     item.fingerprint(), existing.id)).fetchone()
                return schedule_from_row(updated), False
            conn.execute("UPDATE schedules SET key = NULL WHERE id = ?", (existing.id,))
        values = insert_values(item, buckets=self.buckets, now_ms=now_ms)
        conn.execute(_INSERT, values)
        return schedule_from_values(values, item), True

    def get(self, schedule_id: str) -> Schedule:
        row = self._conn.execute(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = ?",
                                 (schedule_id,)).fetchone()
        if row is None:
            raise NotFoundError("schedule", schedule_id)
        return schedule_from_row(row)

    def list(
        self,
        *,
        status: Status | None = None,
        channel: str | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        after_id: str | None = None,
        limit: int = 100,
    ) -> list[Schedule]:
        where, args = list_filters("?", status=status, channel=channel, due_from_ms=due_from_ms,
                                   due_to_ms=due_to_ms, after_id=after_id)
        rows = self._conn.execute(
            f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE {where} "
            "ORDER BY id LIMIT ?", (*args, limit)).fetchall()
        return [schedule_from_row(r) for r in rows]

    def cancel(self, schedule_id: str, *, now_ms: int) -> Schedule:
        with self._tx(durable=True) as conn:
            row = conn.execute(
                f"UPDATE schedules SET status = 'CANCELLED', next_ms = ? "
                f"WHERE id = ? AND status = 'PENDING' RETURNING {SCHEDULE_COLUMNS}",
                (now_ms, schedule_id)).fetchone()
        if row is not None:
            return schedule_from_row(row)
        current = self.get(schedule_id)
        raise ConflictError(f"schedule {schedule_id} is {current.status.value}: too late to cancel",
                            status=current.status.value, ident=schedule_id)

    def reschedule(self, schedule_id: str, *, now_ms: int, due_ms: int | None = None,
                   payload: bytes | None = None, payload_kind: PayloadKind | None = None,
                   headers: dict[str, str] | None = None) -> Schedule:
        with self._tx(durable=True) as conn:
            row = conn.execute(
                "UPDATE schedules SET due_ms = coalesce(?, due_ms), "
                "next_ms = coalesce(?, next_ms), "
                "payload = coalesce(?, payload), payload_kind = coalesce(?, payload_kind), "
                "headers = coalesce(?, headers) WHERE id = ? AND status = 'PENDING' "
                f"RETURNING {SCHEDULE_COLUMNS}",
                (due_ms, due_ms, payload, payload_kind.value if payload_kind else None,
                 None if headers is None else json.dumps(headers), schedule_id)).fetchone()
        if row is not None:
            return schedule_from_row(row)
        current = self.get(schedule_id)
        raise ConflictError(f"schedule {schedule_id} is {current.status.value}: too late to "
                            "change", status=current.status.value, ident=schedule_id)

    def halted_keys(self, *, tenant: str | None = None) -> builtins.list[HaltedKey]:
        rows = self._conn.execute(
            "SELECT tenant, ordering_key, schedule_id, halted_ms, reason FROM halted_keys "
            "WHERE ? IS NULL OR tenant = ? ORDER BY halted_ms", (tenant, tenant)).fetchall()
        return [HaltedKey(*r) for r in rows]

    def resume_key(self, *, tenant: str, ordering_key: str) -> None:
        with self._tx() as conn:
            gone = conn.execute("DELETE FROM halted_keys WHERE tenant = ? AND ordering_key = ?",
                                (tenant, ordering_key)).rowcount
        if not gone:
            raise NotFoundError("halted ordering key", ordering_key)

    def deliveries(self, schedule_id: str) -> builtins.list[Delivery]:
        rows = self._conn.execute(
            f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE schedule_id = ? "
            "ORDER BY started_ms, attempt", (schedule_id,)).fetchall()
        return [delivery_from_row(r) for r in rows]

    # -- channels --------------------------------------------------------------------------

    def put_channel(self, spec: ChannelSpec) -> ChannelSpec:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO channels VALUES (?, ?, ?)",
                         (spec.name, spec.kind.value, json.dumps(spec.config)))
        return spec

    def get_channel(self, name: str) -> ChannelSpec:
        row = self._conn.execute("SELECT name, kind, config FROM channels WHERE name = ?",
                                 (name,)).fetchone()
        if row is None:
            raise NotFoundError("channel", name)
        return channel_from_row(row)

    def list_channels(self) -> builtins.list[ChannelSpec]:
        rows = self._conn.execute("SELECT name, kind, config FROM channels ORDER BY name")
        return [channel_from_row(r) for r in rows]

    def delete_channel(self, name: str) -> None:
        with self._tx() as conn:
            if conn.execute("DELETE FROM channels WHERE name = ?", (name,)).rowcount == 0:
                raise NotFoundError("channel", name)

    # -- dispatch --------------------------------------------------------------------------

    def next_epoch(self) -> int:
        with self._tx() as conn:
            row = conn.execute("UPDATE meta SET v = CAST(v AS INTEGER) + 1 WHERE k = 'epoch' "
                               "RETURNING v").fetchone()
        return int(row[0])

    def next_due_ms(self, *, now_ms: int, lease_ms: int) -> int | None:
        conn = self._conn
        pending = conn.execute("SELECT min(next_ms) FROM schedules "
                               "WHERE status = 'PENDING' AND policy IS NULL").fetchone()[0]
        claimed = conn.execute(
            "SELECT min(claimed_ms) FROM schedules WHERE status = 'CLAIMED'").fetchone()[0]
        throttled = throttled_next_ms(conn, SQLITE, now_ms=now_ms)
        return earliest(pending if throttled is None else min(throttled, pending or throttled),
                        claimed, lease_ms)

    def claim(
        self,
        *,
        epoch: int,
        bucket_lo: int,
        bucket_hi: int,
        until_ms: int,
        now_ms: int,
        lease_ms: int,
        limit: int,
    ) -> builtins.list[ClaimedRow]:
        with self._tx() as conn:
            done = conn.execute(
                "SELECT 1 FROM claims WHERE epoch = ? AND bucket_lo = ? AND bucket_hi = ?",
                (epoch, bucket_lo, bucket_hi)).fetchone()
            if done is not None:
                rows = conn.execute(
                    f"SELECT {CLAIM_COLUMNS} FROM schedules WHERE status = 'CLAIMED' "
                    "AND claim_epoch = ? AND bucket BETWEEN ? AND ? ORDER BY next_ms, id",
                    (epoch, bucket_lo, bucket_hi)).fetchall()
                return [claimed_from_row(r) for r in rows]
            # RETURNING comes in no particular order: sort each group earliest first.
            rows = sorted(conn.execute(
                f"UPDATE schedules SET claim_epoch = ?, claimed_ms = ? WHERE id IN ("
                "SELECT id FROM schedules WHERE status = 'CLAIMED' AND claimed_ms < ? "
                "AND bucket BETWEEN ? AND ? ORDER BY claimed_ms LIMIT ?) "
                f"RETURNING {CLAIM_COLUMNS}, next_ms",
                (epoch, now_ms, now_ms - lease_ms, bucket_lo, bucket_hi, limit)), key=_BY_NEXT)
            if len(rows) < limit:
                rows += sorted(conn.execute(
                    "UPDATE schedules SET status = 'CLAIMED', claim_epoch = ?, claimed_ms = ? "
                    "WHERE id IN (SELECT s.id FROM schedules s WHERE s.status = 'PENDING' "
                    "AND s.policy IS NULL "
                    f"AND s.bucket BETWEEN ? AND ? AND s.next_ms <= ? AND {_HEAD} "
                    "ORDER BY s.next_ms LIMIT ?) "
                    f"RETURNING {CLAIM_COLUMNS}, next_ms",
                    (epoch, now_ms, bucket_lo, bucket_hi, until_ms, limit - len(rows))),
                    key=_BY_NEXT)
            if len(rows) < limit:
                rows += claim_throttled(conn, SQLITE, epoch=epoch, bucket_lo=bucket_lo,
                                        bucket_hi=bucket_hi, until_ms=until_ms, now_ms=now_ms,
                                        limit=limit - len(rows))
            conn.execute("INSERT INTO claims VALUES (?, ?, ?, ?)",
                         (epoch, bucket_lo, bucket_hi, now_ms))
        return [claimed_from_row(r) for r in rows]

    def acknowledge(self, *, epoch: int, acks: Sequence[Ack], now_ms: int) -> int:
        if not acks:
            return 0
        delivered = [a.schedule_id for a in acks if a.status is Status.DELIVERED]
        retries = [(a.next_ms, a.error, a.schedule_id, epoch) for a in acks
                   if a.status is Status.PENDING]
        dead = [a for a in acks if a.status is Status.DEAD]
        applied = 0
        with self._tx() as conn:
            if delivered:
                applied += conn.execute(
                    "UPDATE schedules SET status = 'DELIVERED', attempts = attempts + 1, "
                    "delivered_ms = ?, last_error = NULL WHERE claim_epoch = ? "
                    "AND status = 'CLAIMED' AND id IN (SELECT value FROM json_each(?))",
                    (now_ms, epoch, json.dumps(delivered))).rowcount
            if retries:
                cur = conn.executemany(
                    "UPDATE schedules SET status = 'PENDING', attempts = attempts + 1, "
                    "next_ms = ?, last_error = ?, claim_epoch = NULL, claimed_ms = NULL "
                    "WHERE id = ? AND claim_epoch = ? AND status = 'CLAIMED'", retries)
                applied += cur.rowcount
            for ack in dead:
                row = conn.execute(
                    "UPDATE schedules SET status = 'DEAD', attempts = attempts + 1, "
                    "last_error = ? WHERE id = ? AND claim_epoch = ? AND status = 'CLAIMED' "
                    "RETURNING tenant, payload, payload_kind, headers, ordering_key",
                    (ack.error, ack.schedule_id, epoch)).fetchone()
                if row is None:
                    continue
                applied += 1
                if ack.halt and row[4]:
                    conn.execute("INSERT INTO halted_keys VALUES (?, ?, ?, ?, ?) "
                                 "ON CONFLICT DO NOTHING",
                                 (row[0], row[4], ack.schedule_id, now_ms, ack.error))
                if ack.dead_letter:
                    self._insert_dead_letter(conn, ack, row, now_ms)
            conn.executemany(
                f"INSERT INTO deliveries ({DELIVERY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                delivery_values(acks, epoch))
            if retries or dead:
                return_tokens(conn, SQLITE, [a.delivery_id for a in acks
                                             if a.status is not Status.DELIVERED])
        return applied

    def _insert_dead_letter(self, conn: sqlite3.Connection, ack: Ack, row: Sequence[Any],
                            now_ms: int) -> None:
        item = dead_letter_item(ack, row, now_ms=now_ms)
        conn.execute(_INSERT, insert_values(item, buckets=self.buckets, now_ms=now_ms))

    # -- health and metrics ----------------------------------------------------------------

    def forget_claims(self, *, before_ms: int) -> int:
        with self._tx() as conn:
            return conn.execute("DELETE FROM claims WHERE claimed_ms < ?", (before_ms,)).rowcount

    def beat(self, component: str, *, now_ms: int, info: dict[str, Any] | None = None) -> None:
        with self._tx() as conn:
            conn.execute("INSERT OR REPLACE INTO beats VALUES (?, ?, ?)",
                         (component, now_ms, json.dumps(info or {})))

    def last_beat(self, component: str) -> tuple[int, dict[str, Any]] | None:
        row = self._conn.execute("SELECT at_ms, info FROM beats WHERE component = ?",
                                 (component,)).fetchone()
        return None if row is None else (int(row[0]), json.loads(row[1]))

    def counts(self) -> dict[Status, int]:
        return self._work(lambda conn: status_counts(conn.execute(COUNTS_SQL).fetchall()),
                          write=False)

    def due_backlog(self, *, now_ms: int) -> int:
        row = self._conn.execute(
            "SELECT count(*) FROM schedules WHERE status = 'PENDING' AND next_ms <= ?",
            (now_ms,)).fetchone()
        return int(row[0])

    def ping(self) -> None:
        try:
            self._conn.execute("SELECT 1").fetchone()
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite {self.path}: {exc}") from exc

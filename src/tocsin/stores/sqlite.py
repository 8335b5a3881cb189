"""SQLite store: the embedded default. One file in WAL mode, shared by the API and the
dispatcher's processes; every write is one ``BEGIN IMMEDIATE`` transaction.

The statements are :mod:`tocsin.stores.sql`'s; this module holds the connection, the writer
lock, the commit level, and the two claim-path statements SQLite spells its own way."""

from __future__ import annotations

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

from tocsin.domain.defaults import BUCKETS
from tocsin.errors import StoreError
from tocsin.owner_only import create_owner_only
from tocsin.stores.rows import (
    CLAIM_ARITY,
    CLAIM_COLUMNS,
    DELIVERY_COLUMNS,
    migrations,
    refuse_newer_schema,
)
from tocsin.stores.sql import SQLITE, SqlStore
from tocsin.stores.sql.tenants import all_relaxed

__all__ = ["SQLiteStore"]

T = TypeVar("T")


class _LockFiles:
    """One thread's open writer-lock and intent files (:meth:`SQLiteStore._writer`), closed
    when the thread ends (its thread-local data goes) or the store closes."""

    def __init__(self, path: str) -> None:
        self.pid = os.getpid()
        self.writer = open(f"{path}.writer-lock", "ab")  # noqa: SIM115
        self.intent = open(f"{path}.claim-lock", "ab")  # noqa: SIM115

    def close(self) -> None:
        self.writer.close()
        self.intent.close()


WAL_CHECKPOINT_PAGES = 10_000
"""Copy the WAL back into the database once it holds this many pages (~40 MB), not SQLite's
default 1 000: a dispatch batch rewrites the same hot pages many times, and each checkpoint,
run by whichever writer crosses the mark while it holds the write lock, copied them again. A
200 000-row drain went from ~13 000/s to ~16 000/s. Much larger WALs make every page lookup
slower (readers search the WAL index), so the WAL is kept bounded."""
YIELD_TO_URGENT_S = 0.5
"""A writer that is not urgent lets urgent ones (claims) go first for at most this long, then
queues like anyone: it can no longer wait without bound behind claims."""
URGENT_POLL_S = 0.002
"""How often a writer yielding to urgent ones looks whether they are gone."""
_BY_NEXT = itemgetter(CLAIM_ARITY, 0)  # (next_ms, id) of a claim row with next_ms appended


class SQLiteStore(SqlStore):
    """A :class:`~tocsin.abc.Store` in one SQLite file (``:memory:`` for a per-process fake)."""

    _dialect = SQLITE
    one_writer = True

    def __init__(self, path: str | Path, *, buckets: int = BUCKETS) -> None:
        path = str(path)
        if path == ":memory:":
            self._target = f"file:tocsin-{uuid.uuid4().hex}?mode=memory&cache=shared"
            self._uri = True
        else:
            # SQLite gives its -wal and -shm the database file's mode.
            create_owner_only(path, siblings=("-wal", "-shm", "-journal"))
            self._target, self._uri = path, False
        self.path = path
        self._local = threading.local()
        self._keepalive = self._connect()  # keeps a shared in-memory database alive
        try:
            if not self._uri:
                self._enable_wal(self._keepalive)
            self._migrate(buckets)
        except BaseException:  # refused (a newer schema) or broken: nothing is left open
            self.close()
            raise

    # -- plumbing --------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(self._target, uri=self._uri, timeout=60,
                                   isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout = 60000")
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(f"PRAGMA wal_autocheckpoint = {WAL_CHECKPOINT_PAGES}")
        except sqlite3.Error as exc:
            raise StoreError(f"sqlite {self.path}: {exc}") from exc
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
    def _writer(self, *, urgent: bool = False) -> Iterator[None]:
        """Queue writers of every process and thread on a kernel lock beside the database: a
        blocked writer wakes the moment the lock is free, where SQLite's busy handler would
        sleep and poll (tens of milliseconds per wait when executors contend). Each thread
        opens the lock files itself (a flock belongs to an open file), so it queues as another
        process would: with one queue per process, a claim waited behind its own process's
        acknowledgement while that one still waited for another process's write.

        An ``urgent`` writer (a claim: someone's schedule is due now) goes before the others:
        while one waits it holds a shared lock on a second file, which the others must take
        exclusively, and at once release, before they queue, and once more when they have the
        lock (they let it go and queue again if an urgent writer came meanwhile). Beside a
        100 000-row burst whose acknowledgements filled the queue, a trickle's claims waited
        hundreds of milliseconds behind them."""
        if self._uri:
            yield
            return
        files = getattr(self._local, "locks", None)
        if files is None or files.pid != os.getpid():  # a forked child opens its own
            files = self._local.locks = _LockFiles(self.path)
        lock, intent = files.writer.fileno(), files.intent.fileno()
        try:
            if urgent:
                fcntl.flock(intent, fcntl.LOCK_SH)
                fcntl.flock(lock, fcntl.LOCK_EX)
                fcntl.flock(intent, fcntl.LOCK_UN)
            else:
                self._queue_behind_urgent(lock, intent)
        except OSError as exc:
            raise StoreError(f"sqlite {self.path}: writer lock: {exc}") from exc
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

    @staticmethod
    def _queue_behind_urgent(lock: int, intent: int) -> None:
        """Take the writer lock ``lock`` exclusively, letting urgent writers (holding
        ``intent`` shared) go first for at most :data:`YIELD_TO_URGENT_S` from the first time
        it sees one; after that it queues for the lock like anyone (claims arriving back to
        back kept an API create or a beat waiting without bound)."""
        deadline: float | None = None
        while deadline is None or time.monotonic() < deadline:
            try:
                fcntl.flock(intent, fcntl.LOCK_EX | fcntl.LOCK_NB)  # no urgent writer waits
            except BlockingIOError:
                deadline = deadline or time.monotonic() + YIELD_TO_URGENT_S
                time.sleep(URGENT_POLL_S)
                continue
            fcntl.flock(intent, fcntl.LOCK_UN)
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                fcntl.flock(intent, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:  # one came while this queued: it goes first
                deadline = deadline or time.monotonic() + YIELD_TO_URGENT_S
                if time.monotonic() >= deadline:
                    return  # waited its share: it keeps the lock
                fcntl.flock(lock, fcntl.LOCK_UN)
                continue
            fcntl.flock(intent, fcntl.LOCK_UN)
            return
        fcntl.flock(lock, fcntl.LOCK_EX)

    @contextmanager
    def _tx(self, *, durable: bool | None = None,
            urgent: bool = False) -> Iterator[sqlite3.Connection]:
        """One write transaction. ``durable`` (a tenant's write): True commits with
        ``synchronous = FULL``, False with ``NORMAL``; None (the dispatcher's own writes,
        which a crash only makes repeat) keeps the connection's level. ``urgent``: see
        :meth:`_writer`."""
        with self._writer(urgent=urgent), self._tx_unlocked(durable) as conn:
            yield conn

    @contextmanager
    def _tx_unlocked(self, durable: bool | None = None) -> Iterator[sqlite3.Connection]:
        try:
            conn = self._conn
            if durable is not None and getattr(self._local, "durable", None) is not durable:
                # SQLite refuses to change the level inside a transaction: set it before BEGIN.
                conn.execute(f"PRAGMA synchronous = {'FULL' if durable else 'NORMAL'}")
                self._local.durable = durable
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

    def _work(self, fn: Callable[[Any], T], *, write: bool = True,
              idempotent: bool = False, urgent: bool = False, pipelined: bool = False) -> T:
        """Every statement runs here (or in :meth:`_tx`): a sqlite3 error of a read or a
        write becomes :class:`~tocsin.errors.StoreError`."""
        if not write:
            try:
                return fn(self._conn)
            except sqlite3.Error as exc:
                raise StoreError(f"sqlite {self.path}: {exc}") from exc
        with self._tx(urgent=urgent) as conn:
            return fn(conn)

    def _migrate(self, buckets: int) -> None:
        with self._tx() as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            row = conn.execute("SELECT v FROM meta WHERE k = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            scripts = migrations("sqlite")
            refuse_newer_schema(version, scripts[-1][0])
            for number, script in scripts:
                if number > version:
                    for statement in _statements(script):
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
        files = getattr(self._local, "locks", None)
        if files is not None:
            files.close()
            self._local.locks = None

    def _tenant_work(self, fn: Callable[[Any], T], *, tenants: frozenset[str],
                     flush: bool = True) -> T:
        # ``flush`` is not used: an import's chunks commit as the tenants' writes do.
        # SQLite refuses to change the commit level inside a transaction: decide it first.
        relaxed = bool(tenants) and self._work(lambda conn: all_relaxed(conn, SQLITE, tenants),
                                               write=False)
        with self._tx(durable=not relaxed) as conn:
            return fn(conn)

    def _insert_many(self, conn: Any, target: str, rows: Sequence[Sequence[Any]]) -> None:
        marks = ", ".join("?" * (target.count(",") + 1))
        conn.executemany(f"INSERT INTO {target} VALUES ({marks})", rows)

    def _claim_sorted(self, conn: Any, update: str,
                      args: Sequence[Any]) -> list[tuple[Any, ...]]:
        # RETURNING comes in no particular order (and SQLite has no UPDATE in a WITH).
        return sorted(conn.execute(f"{update} RETURNING {CLAIM_COLUMNS}, next_ms", args),
                      key=_BY_NEXT)

    def _log_deliveries(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        # One statement over a JSON array, not executemany: sqlite3 lets go of the GIL around
        # each row's step and must take it back for the next, and beside the engine's busy
        # threads (its channel loop sending) each take waits up to a switch interval (5 ms).
        # An acknowledgement of 1 000 deliveries held the writer lock 1.2-2.2 s twice in
        # each 20 s of 5 000 webhooks a second (4 ms alone): every claim, pull and
        # acknowledgement of every process waited, and the stream stalled.
        if not rows:
            return
        picks = ", ".join(f"json_extract(value, '$[{i}]')" for i in range(len(rows[0])))
        conn.execute(f"INSERT INTO deliveries ({DELIVERY_COLUMNS}) SELECT {picks} "
                     "FROM json_each(?)", (json.dumps(rows),))

    def _mark_delivered(self, conn: Any, ids: Sequence[str], *, epoch: int, now_ms: int) -> int:
        return int(conn.execute(
            "UPDATE schedules SET status = 'DELIVERED', attempts = attempts + 1, "
            "delivered_ms = ?, last_error = NULL WHERE claim_epoch = ? "
            "AND status = 'CLAIMED' AND id IN (SELECT value FROM json_each(?))",
            (now_ms, epoch, json.dumps(ids))).rowcount)


def _statements(script: str) -> list[str]:
    """The statements of a migration script, each whole: a trigger's body holds semicolons
    of its own."""
    found, pending = [], ""
    for piece in script.split(";"):
        pending += piece + ";"
        if sqlite3.complete_statement(pending):
            if pending.strip(" \n;"):
                found.append(pending)
            pending = ""
    return found

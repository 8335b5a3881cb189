"""PostgreSQL store: the system of record when many machines dispatch.

The statements are :mod:`tocsin.stores.sql`'s, the same as SQLite's; what differs is how
concurrency is decided (the :data:`~tocsin.stores.sql.POSTGRES` dialect's row locks), the
connection pool, ``COPY`` for bulk inserts, and the two claim-path statements PostgreSQL spells
its own way. Claims take rows with ``FOR UPDATE SKIP LOCKED``, so two epochs
claiming one bucket range at once get disjoint sets; the replay marker is inserted first, so a
concurrent replay of the same (epoch, range) waits for the claim and then re-reads it.

Each process opens its own ``psycopg_pool.ConnectionPool`` on first use, so the object is cheap
to build and to pickle, and a forked or unpickled copy never touches its parent's connections.
Connection failures raise :class:`~tocsin.errors.StoreError`; after a server restart the pool
drops its dead connections and the call is retried once when that is safe (a read, an
idempotent write, or a transaction that failed before it began).

Tables live in the connection's ``search_path``: to keep a store in a schema of its own, add
``?options=-csearch_path%3Dname`` to the URL.
"""

from __future__ import annotations

import os
import random
import re
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from contextlib import suppress
from typing import TYPE_CHECKING, Any, TypeVar

from tocsin.domain.defaults import BUCKETS
from tocsin.errors import StoreError
from tocsin.redact import redact_url
from tocsin.stores.rows import (
    CLAIM_COLUMNS,
    DELIVERY_COLUMNS,
    migrations,
    refuse_newer_schema,
)
from tocsin.stores.sql import POSTGRES, SqlStore
from tocsin.stores.sql.base import sent
from tocsin.stores.sql.metrics import FENCED, SHARDS
from tocsin.stores.sql.tenants import all_relaxed

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["LOCKS_TRUSTED_AFTER_S", "RUN_LOCKS", "PostgresStore", "delivered_ack", "jit_off",
           "run_session_name"]

T = TypeVar("T")
_BY_IDS = "s.id = ANY(%b::text[]) AND s.claim_epoch = %s AND s.status || '' = 'CLAIMED'"
"""An acknowledgement's rows: its ids (one array) still claimed by its epoch. The fence is
spelled to match no index (as ``+s.bucket`` is for the claim), so the ids are looked up in the
primary key, never joined: joined to ``unnest`` of the ids, with ``status = 'CLAIMED'`` a
planner without statistics read every claimed row through ``schedules_lease`` and compared
each with every id (5 of 2 000 claimed: 15 ms, 0.4 by key), and with it spelled apart, 1 000
ids against 3 000 claimed took 1.6 s (a nested loop's join filter) or a hash join over the
whole table; ``= ANY`` of 1 000 ids: 27-37 ms, the planner's worst a scan of the table
(93 ms at 125 000 rows without statistics)."""
_MIGRATION_LOCK = 0x746F6373696E  # pg_advisory_xact_lock key: "tocsin" in ASCII
RUN_LOCKS = 0x746F6373  # the first key of a dispatcher run's session lock: "tocs" in ASCII
LOCKS_TRUSTED_AFTER_S = 30
"""After a server start, missing session locks say nothing for this long (every session was
cut; the live runs lock again as they reconnect): the beats alone tell."""
_open_lock = threading.Lock()


def _reset_open_lock() -> None:
    global _open_lock
    _open_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_open_lock)


def _reason(exc: Exception) -> str:
    """A driver error's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def jit_off(options: str) -> str:
    """A connection's ``options`` with ``-c jit=off`` added, unless they set ``jit`` already
    (a setting named ``jit``, not any word that holds the letters: ``application_name=jitney``
    still gets it)."""
    if re.search(r"(?:^|\s)(?:-c\s*|--)?jit\s*=", options):
        return options
    return f"{options} -c jit=off".strip()


def delivered_ack(ids: Sequence[str], rows: Sequence[Sequence[Any]],
                  counts: Mapping[tuple[str, str], int], *, epoch: int,
                  now_ms: int) -> tuple[str, list[Any]]:
    """The one statement (and its arguments) that acknowledges deliveries of ``epoch``: the
    schedules ``ids`` marked delivered, their attempt-log ``rows`` (``DELIVERY_COLUMNS``)
    inserted, ``counts`` and the fenced verdicts added to the counters, on one random shard;
    it answers how many schedules it marked. Its commit does not wait for the WAL flush."""
    items = [(name, lab, n) for (name, lab), n in sorted(counts.items()) if n]
    names, labs, values = ([list(c) for c in zip(*items, strict=True)] if items
                           else ([], [], []))
    shard = random.randrange(SHARDS)
    sql = (
        "WITH unflushed AS (SELECT set_config('synchronous_commit', 'off', true)), "
        "done AS (UPDATE schedules s SET status = 'DELIVERED', "
        "attempts = s.attempts + 1, delivered_ms = %s, last_error = NULL "
        f"WHERE {_BY_IDS} RETURNING 1), "
        f"logged AS (INSERT INTO deliveries ({DELIVERY_COLUMNS}) SELECT * FROM unnest("
        "%b::text[], %b::text[], %b::integer[], %b::bigint[], %b::bigint[], %b::bigint[], "
        "%b::text[], %b::text[], %b::bigint[])), "
        "counted AS (INSERT INTO counters SELECT c.name, c.labels, %s, c.value FROM ("
        "SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[]) "
        f"UNION ALL SELECT '{FENCED}', '{{}}', %s - (SELECT count(*) FROM done)) "
        "AS c(name, labels, value) WHERE c.value > 0 "
        "ON CONFLICT (name, labels, shard) DO UPDATE "
        "SET value = counters.value + excluded.value) "
        "SELECT count(*) FROM done, unflushed")
    args = [now_ms, list(ids), epoch, *(list(c) for c in zip(*rows, strict=True)),
            shard, names, labs, values, len(ids)]
    return sql, args


def _pipelined(conn: psycopg.Connection[Any], work: Callable[[psycopg.Connection[Any]], T], *,
               transaction: bool) -> T:
    """``work`` in pipeline mode (in one ``transaction``, or as reads): each statement whose
    rows ``work`` does not read yet goes out with the next one it reads, BEGIN with the first,
    COMMIT with the pipeline's closing sync, one round trip for each such group (a claim's
    statements take PostgreSQL a fraction of the round trips between them). Not
    ``conn.transaction()``: in a pipeline it syncs, a round trip each, after BEGIN and again
    before COMMIT."""
    from psycopg import Error
    from psycopg.pq import TransactionStatus

    try:
        with conn.pipeline():
            if transaction:
                conn.execute("BEGIN")
            result = work(conn)
            if transaction:
                conn.execute("COMMIT")
    except BaseException:
        if conn.info.transaction_status in (TransactionStatus.INTRANS,
                                            TransactionStatus.INERROR):
            with suppress(Error):  # a lost connection: the pool drops it
                conn.rollback()
        raise
    return result


def run_session_name(run: str) -> str:
    """The ``application_name`` of every session of dispatcher run ``run`` (set through
    ``PGAPPNAME`` in its processes' environment), by which a fence finds them."""
    return f"tocsin-run-{run}"


class PostgresStore(SqlStore):
    """A :class:`~tocsin.abc.Store` in a PostgreSQL database (``postgresql://`` URL).

    ``buckets`` applies only when this call creates the store; an existing store keeps its own.
    ``max_size`` bounds each process's pool; ``timeout_s`` is how long a call waits for a
    connection before :class:`~tocsin.errors.StoreError`.
    """

    _dialect = POSTGRES

    def __init__(self, url: str, *, buckets: int = BUCKETS, min_size: int = 1, max_size: int = 10,
                 timeout_s: float = 10.0) -> None:
        self.url = url
        # error messages name the store, never its password (a conninfo string: not at all)
        self._where = redact_url(url) if "://" in url else "postgresql (conninfo)"
        self._requested_buckets = buckets
        self._min_size, self._max_size, self._timeout_s = min_size, max_size, timeout_s
        self._pool: ConnectionPool[Any] | None = None
        self._pid = 0
        self._buckets: int | None = None
        self._healthy = False
        self._types: dict[str, dict[str, int]] = {}
        self.schema_version = 0
        self._run_lock: psycopg.Connection[Any] | None = None
        self._run_lock_owner = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"], state["_pid"], state["_healthy"] = None, 0, False
        state["_run_lock"] = None
        return state

    # -- a dispatcher run's session lock -----------------------------------------------------

    def hold_run_lock(self, lock_id: int) -> bool:
        """Hold ``pg_advisory_lock(RUN_LOCKS, lock_id)`` on a connection of its own for as long
        as this process lives: when the process dies its connection closes and PostgreSQL lets
        the lock go, which the other dispatchers see at their next look (within 100 ms) rather
        than after the missed beats. Asked again, it takes the lock again on a new connection
        if the session was lost (a restart of the server)."""
        import psycopg

        conn = self._run_lock
        if conn is not None and not conn.closed and self._run_lock_owner == os.getpid():
            try:
                conn.execute("SELECT 1")
                return True
            except psycopg.Error:
                conn.close()
        try:
            conn = psycopg.connect(self.url, autocommit=True,
                                   connect_timeout=max(2, min(10, int(self._timeout_s))))
            conn.execute("SELECT pg_advisory_lock(%s, %s)", (RUN_LOCKS, lock_id))
        except psycopg.Error as exc:
            raise StoreError(f"{self._where}: {_reason(exc)}") from exc
        self._run_lock, self._run_lock_owner = conn, os.getpid()
        return True

    def _cut_off(self, runs: list[str]) -> None:
        """End every session of the dispatcher runs about to be fenced (their processes name
        them in ``application_name``: :func:`run_session_name`): a frozen dispatcher stopped in
        the middle of a claim holds its rows' locks and a share lock on its buckets' owners,
        for as long as it stays frozen, and the fence would wait for it."""
        names = [run_session_name(run) for run in runs]

        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                         "WHERE application_name = ANY(%s) AND pid <> pg_backend_pid()",
                         (names,))

        self._run(work, write=False)

    def _lost_runs(self, conn: Any, *, now_ms: int) -> frozenset[str]:
        """The runs whose session lock nobody holds: their process died. Not trusted in the
        first :data:`LOCKS_TRUSTED_AFTER_S` after the server started (every session was lost
        then, and the live runs take their locks again as they reconnect)."""
        rows = conn.execute(
            "SELECT r.run FROM runs r WHERE r.lock_id IS NOT NULL AND r.released_ms IS NULL "
            "AND now() - pg_postmaster_start_time() > make_interval(secs => %s) "
            "AND NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' "
            "AND l.granted AND l.database = (SELECT oid FROM pg_database "
            "WHERE datname = current_database()) AND l.classid::bigint = %s "
            "AND l.objid::bigint = r.lock_id AND l.objsubid = 2)",
            (LOCKS_TRUSTED_AFTER_S, RUN_LOCKS)).fetchall()
        return frozenset(str(r[0]) for r in rows)

    @property
    def buckets(self) -> int:  # type: ignore[override]  # read-only: fixed at creation
        """B, as recorded when the store was created (read on first use)."""
        if self._buckets is None:
            self.open()
        assert self._buckets is not None
        return self._buckets

    # -- plumbing --------------------------------------------------------------------------

    def open(self) -> PostgresStore:
        """Connect this process and create or migrate the schema if needed (every call does
        it lazily; :func:`~tocsin.stores.open_store` calls it to fail early). A store it
        refuses (a schema newer than this code, a server it cannot reach) is closed: its pool
        would otherwise be left to the garbage collector, whose ``__del__`` cannot join the
        pool's threads from one of them."""
        try:
            if self._buckets is None:
                self._migrate()
            else:
                self._connections()
        except BaseException:
            self.close()
            raise
        return self

    def _connections(self) -> ConnectionPool[Any]:
        """This process's pool, opened on first use here (a parent's pool, inherited by a
        fork, is dropped without closing: its connections belong to the parent)."""
        pool = self._pool
        if pool is not None and self._pid == os.getpid():
            return pool
        with _open_lock:
            if self._pool is None or self._pid != os.getpid():
                self._pool = self._new_pool()
                self._pid, self._healthy = os.getpid(), False
            return self._pool

    def _new_pool(self) -> ConnectionPool[Any]:
        """The pool, with ``jit=off`` on each connection unless the URL's ``options`` set it:
        the claim's cost estimate beside a large burst (its ordering-key predicate priced per
        row of the burst) passed ``jit_above_cost``, and PostgreSQL spent 1.4-2.6 s compiling
        a statement that ran in 2 ms — every claim, while another tenant's schedules waited."""
        try:
            from psycopg.conninfo import conninfo_to_dict
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise StoreError("PostgreSQL needs psycopg: pip install 'tocsin[postgres]'") from exc
        try:
            given = conninfo_to_dict(self.url)
        except Exception as exc:
            raise StoreError(f"{self._where}: bad PostgreSQL URL: {_reason(exc)}") from exc
        # PGAPPNAME (a dispatcher run's name, :func:`run_session_name`) names the pool's
        # sessions too: a keyword would override it, and a fence could not find them to end
        defaults = {"connect_timeout": 10,
                    "application_name": os.environ.get("PGAPPNAME") or "tocsin"}
        options = jit_off(str(given.get("options") or ""))
        pool: ConnectionPool[Any] = ConnectionPool(
            self.url, open=False, name=f"tocsin-{os.getpid()}",
            kwargs={"autocommit": True, "options": options,
                    **{k: v for k, v in defaults.items() if k not in given}},
            min_size=self._min_size, max_size=self._max_size, timeout=self._timeout_s,
            # give up re-connecting early: the next call grows the pool again at once, rather
            # than wait out a long back-off after the server is back
            reconnect_timeout=max(5.0, self._timeout_s))
        pool.open(wait=False)
        return pool

    def _run(self, work: Callable[[psycopg.Connection[Any]], T], *, write: bool = True,
             idempotent: bool = False, migrating: bool = False, single: bool = False,
             pipelined: bool = False) -> T:
        """Run ``work`` on a pooled connection, in one transaction when ``write``: the single
        place every transaction begins (per-transaction settings such as a tenant's
        ``SET LOCAL synchronous_commit`` belong right after its BEGIN).

        A dead connection (server restarted) is dropped and the call retried once when
        ``work`` is safe to repeat or failed before its transaction began; a deadlock or
        serialization failure (rolled back as a whole) is retried too. ``single``: ``work``
        runs one statement, which is its own transaction (no BEGIN and COMMIT, each a round
        trip that waits for the server: under CPU contention a millisecond or more each);
        it is retried as a write. ``pipelined``: the transaction runs in pipeline mode
        (:func:`_pipelined`). While the server has not answered since the last failure, a
        direct connection attempt first makes an unreachable server fail fast instead of
        after the pool's ``timeout_s``.
        """
        import psycopg
        from psycopg_pool import PoolTimeout

        if self._buckets is None and not migrating:
            self._migrate()
        pool = self._connections()
        for attempt in range(3):
            if not self._healthy and (problem := self._probe()):
                raise StoreError(f"{self._where}: cannot connect: {problem}")
            begun = False
            try:
                with pool.connection() as conn:
                    if pipelined:
                        begun = True
                        result = _pipelined(conn, work, transaction=write)
                    elif write and not single:
                        with conn.transaction():
                            begun = True
                            result = work(conn)
                    else:
                        begun = True
                        result = work(conn)
                self._healthy = True
                return result
            except PoolTimeout as exc:
                self._healthy = False
                problem = self._probe() or f"all {self._max_size} connections busy"
                raise StoreError(f"{self._where}: no connection within {self._timeout_s:g}s: "
                                 f"{problem}") from exc
            except psycopg.errors.TransactionRollback as exc:
                if attempt == 2:
                    raise StoreError(f"{self._where}: {_reason(exc)}") from exc
            except psycopg.OperationalError as exc:
                self._healthy = False
                if attempt > 0 or (begun and write and not idempotent):
                    raise StoreError(f"{self._where}: {_reason(exc)}") from exc
                pool.check()  # dispose of every dead connection before the retry
            except psycopg.Error as exc:
                raise StoreError(f"{self._where}: {_reason(exc)}") from exc
        raise AssertionError("unreachable")

    def _probe(self) -> str | None:
        """None when a direct connection succeeds, else why it failed (refused, auth...)."""
        import psycopg

        try:
            psycopg.connect(self.url, connect_timeout=max(2, min(10, int(self._timeout_s)))
                            ).close()
        except psycopg.Error as exc:
            return _reason(exc)
        return None

    def _work(self, fn: Callable[[Any], T], *, write: bool = True,
              idempotent: bool = False, urgent: bool = False, pipelined: bool = False) -> T:
        return self._run(fn, write=write, idempotent=idempotent, pipelined=pipelined)

    def _single(self, fn: Callable[[Any], T], *, idempotent: bool = False,
                urgent: bool = False) -> T:
        return self._run(fn, idempotent=idempotent, single=True)

    def _migrate(self) -> None:
        """Create or upgrade the schema, one process at a time (transaction advisory lock)."""

        def work(conn: psycopg.Connection[Any]) -> tuple[int, int]:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            row = conn.execute("SELECT v FROM meta WHERE k = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            scripts = migrations("postgres")
            refuse_newer_schema(version, scripts[-1][0])
            for number, script in scripts:
                if number > version:
                    conn.execute(script.encode())  # several statements, no parameters
                    version = number
            conn.execute("INSERT INTO meta VALUES ('schema_version', %s) "
                         "ON CONFLICT (k) DO UPDATE SET v = EXCLUDED.v", (str(version),))
            conn.execute("INSERT INTO meta VALUES ('buckets', %s) ON CONFLICT (k) DO NOTHING",
                         (str(self._requested_buckets),))
            conn.execute("INSERT INTO meta VALUES ('epoch', '0') ON CONFLICT (k) DO NOTHING")
            found = conn.execute("SELECT v FROM meta WHERE k = 'buckets'").fetchone()
            assert found is not None
            return version, int(found[0])

        self.schema_version, self._buckets = self._run(work, idempotent=True, migrating=True)

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._pid == os.getpid():
            pool.close()
        lock, self._run_lock = self._run_lock, None
        if lock is not None and self._run_lock_owner == os.getpid():
            lock.close()  # the run's lock goes with it

    # -- what PostgreSQL does its own way ---------------------------------------------------

    def _tenant_work(self, fn: Callable[[Any], T], *, tenants: frozenset[str],
                     flush: bool = True) -> T:
        def work(conn: psycopg.Connection[Any]) -> T:
            if not flush:
                conn.execute("SET LOCAL synchronous_commit = off")
            elif tenants:
                self._apply_durability(conn, all_relaxed(conn, POSTGRES, tenants))
            return fn(conn)

        return self._run(work)

    def _flush_commits(self) -> None:
        """One small transaction that commits with ``synchronous_commit = on``: it is given
        an id (``pg_current_xact_id``), so it writes a commit record, and waiting for that
        record's flush makes every commit before it durable (the WAL is flushed in order),
        those that did not wait included."""
        def work(conn: psycopg.Connection[Any]) -> None:
            conn.execute("SET LOCAL synchronous_commit = on")
            conn.execute("SELECT pg_current_xact_id()")

        self._run(work, idempotent=True)

    def _apply_durability(self, conn: psycopg.Connection[Any], relaxed: bool) -> None:
        """A relaxed tenant's transaction commits without waiting for the WAL flush; a strict
        one with the server's setting (``on`` unless the server was configured otherwise)."""
        if relaxed:
            conn.execute("SET LOCAL synchronous_commit = off")

    def _insert_many(self, conn: Any, target: str, rows: Sequence[Sequence[Any]]) -> None:
        """COPY: the bulk path."""
        with conn.cursor() as cur, cur.copy(f"COPY {target} FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)

    def _insert_new(self, conn: Any, target: str, rows: Sequence[Sequence[Any]]) -> bool:
        import psycopg

        try:
            with conn.transaction():  # a savepoint: a held key undoes this COPY alone
                self._copy_binary(conn, target, rows)
        except psycopg.errors.UniqueViolation:
            return False
        return True

    def _copy_binary(self, conn: Any, target: str, rows: Sequence[Sequence[Any]]) -> None:
        """COPY in PostgreSQL's binary format: no value is written as text and parsed back
        (a payload in hex, each number in digits). An import's chunk of 100 000 rows: the
        client 1.7-2.3 -> 1.2-1.3 us a row, the server about 0.5 us less."""
        table, _, columns = target.partition("(")
        types = self._column_types(conn, table.strip())
        with conn.cursor() as cur, cur.copy(f"COPY {target} FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([types[name.strip()] for name in columns.rstrip(")").split(",")])
            for row in rows:
                copy.write_row(row)

    def _column_types(self, conn: Any, table: str) -> dict[str, int]:
        """The type (oid) of each column of ``table``, read once per store object."""
        if table not in self._types:
            self._types[table] = dict(conn.execute(
                "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s::regclass "
                "AND attnum > 0 AND NOT attisdropped", (table,)).fetchall())
        return self._types[table]

    def _claim_sorted(self, conn: Any, update: str,
                      args: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._send_claim_sorted(conn, update, args)()

    def _send_claim_sorted(self, conn: Any, update: str,
                           args: Sequence[Any]) -> Callable[[], list[tuple[Any, ...]]]:
        return sent(conn, POSTGRES, f"WITH taken AS ({update} RETURNING {CLAIM_COLUMNS}, "
                    "next_ms AS sort_ms) SELECT * FROM taken ORDER BY sort_ms, id", args)

    def _acknowledge_delivered(self, ids: Sequence[str], rows: Sequence[Sequence[Any]],
                               counts: Counter[tuple[str, str]], *, epoch: int, now_ms: int,
                               urgent: bool) -> int | None:
        """One statement, its own transaction (one round trip): mark the schedules
        delivered, log the attempts, add the counters (the fenced ones counted from what the
        update changed). Its commit does not wait for the WAL flush (see
        :meth:`~tocsin.stores.sql.dispatch.SqlDispatch.acknowledge`): ``set_config(...,
        true)`` holds for the statement's own transaction, whose commit reads it. Before:
        BEGIN, UPDATE, COPY (start, rows, end), an upsert per counter, COMMIT and its flush,
        eight round trips."""
        sql, args = delivered_ack(ids, rows, counts, epoch=epoch, now_ms=now_ms)

        def work(conn: psycopg.Connection[Any]) -> int:
            row = conn.execute(sql, args).fetchone()
            assert row is not None
            return int(row[0])

        return self._run(work, single=True)

    def _log_deliveries(self, conn: Any, rows: Sequence[Sequence[Any]]) -> None:
        """One INSERT of a column array each, sent in binary: not COPY, whose start, data and
        end are three round trips, and whose rows the driver formats as text one by one (an
        acknowledgement's few to 1 000 rows: 0.5-3 ms of the server's time a COPY, most of
        it waiting for the client's rows)."""
        conn.execute(
            f"INSERT INTO deliveries ({DELIVERY_COLUMNS}) SELECT * FROM unnest("
            "%b::text[], %b::text[], %b::integer[], %b::bigint[], %b::bigint[], %b::bigint[], "
            "%b::text[], %b::text[], %b::bigint[])", [list(c) for c in zip(*rows, strict=True)])

    def _mark_delivered(self, conn: Any, ids: Sequence[str], *, epoch: int, now_ms: int) -> int:
        return int(conn.execute(
            "UPDATE schedules s SET status = 'DELIVERED', attempts = s.attempts + 1, "
            f"delivered_ms = %s, last_error = NULL WHERE {_BY_IDS}",
            (now_ms, list(ids), epoch)).rowcount)

"""PostgreSQL store: the system of record when many machines dispatch.

Semantics mirror :mod:`tocsin.stores.sqlite` statement for statement; what differs is how
concurrency is decided. Claims take rows with ``FOR UPDATE SKIP LOCKED``, so two epochs
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

import builtins
import json
import os
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import urlsplit

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
    POSTGRES,
    RecurringAndPolicies,
    all_relaxed,
    claim_throttled,
    return_tokens,
    throttled_next_ms,
)

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import ConnectionPool

__all__ = ["PostgresStore"]

T = TypeVar("T")
_MIGRATION_LOCK = 0x746F6373696E  # pg_advisory_xact_lock key: "tocsin" in ASCII
_INSERT = f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES ({', '.join(['%s'] * INSERT_ARITY)})"
_HEAD = head_of_key("seq")
_open_lock = threading.Lock()


def _reset_open_lock() -> None:
    global _open_lock
    _open_lock = threading.Lock()


os.register_at_fork(after_in_child=_reset_open_lock)


def _reason(exc: Exception) -> str:
    """A driver error's message on one line."""
    return " ".join(str(exc).split()) or type(exc).__name__


def _redact(url: str) -> str:
    """``url`` without its password or options, for error messages."""
    parts = urlsplit(url)
    if not parts.scheme.startswith("postgres"):
        return "postgresql (conninfo)"
    host = parts.netloc.rsplit("@", 1)[-1]
    user = f"{parts.username}@" if parts.username else ""
    return f"postgresql://{user}{host}{parts.path}"


def _copy(conn: psycopg.Connection[Any], target: str, rows: Sequence[Sequence[Any]]) -> None:
    """Insert many rows into ``target`` (``table (columns)``) with COPY: the bulk path."""
    with conn.cursor() as cur, cur.copy(f"COPY {target} FROM STDIN") as copy:
        for row in rows:
            copy.write_row(row)


class PostgresStore(RecurringAndPolicies):
    """A :class:`~tocsin.abc.Store` in a PostgreSQL database (``postgresql://`` URL).

    ``buckets`` applies only when this call creates the store; an existing store keeps its own.
    ``max_size`` bounds each process's pool; ``timeout_s`` is how long a call waits for a
    connection before :class:`~tocsin.errors.StoreError`.
    """

    _dialect = POSTGRES

    def __init__(self, url: str, *, buckets: int = 64, min_size: int = 1, max_size: int = 10,
                 timeout_s: float = 10.0) -> None:
        self.url = url
        self._where = _redact(url)
        self._requested_buckets = buckets
        self._min_size, self._max_size, self._timeout_s = min_size, max_size, timeout_s
        self._pool: ConnectionPool[Any] | None = None
        self._pid = 0
        self._buckets: int | None = None
        self._healthy = False
        self.schema_version = 0

    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state["_pool"], state["_pid"], state["_healthy"] = None, 0, False
        return state

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
        it lazily; :func:`~tocsin.stores.open_store` calls it to fail early)."""
        if self._buckets is None:
            self._migrate()
        else:
            self._connections()
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
        try:
            from psycopg.conninfo import conninfo_to_dict
            from psycopg_pool import ConnectionPool
        except ImportError as exc:
            raise StoreError("PostgreSQL needs psycopg: pip install 'tocsin[postgres]'") from exc
        try:
            given = conninfo_to_dict(self.url)
        except Exception as exc:
            raise StoreError(f"{self._where}: bad PostgreSQL URL: {_reason(exc)}") from exc
        defaults = {"connect_timeout": 10, "application_name": "tocsin"}
        pool: ConnectionPool[Any] = ConnectionPool(
            self.url, open=False, name=f"tocsin-{os.getpid()}",
            kwargs={"autocommit": True, **{k: v for k, v in defaults.items() if k not in given}},
            min_size=self._min_size, max_size=self._max_size, timeout=self._timeout_s,
            # give up re-connecting early: the next call grows the pool again at once, rather
            # than wait out a long back-off after the server is back
            reconnect_timeout=max(5.0, self._timeout_s))
        pool.open(wait=False)
        return pool

    def _run(self, work: Callable[[psycopg.Connection[Any]], T], *, write: bool = True,
             idempotent: bool = False, migrating: bool = False) -> T:
        """Run ``work`` on a pooled connection, in one transaction when ``write``: the single
        place every transaction begins (per-transaction settings such as a tenant's
        ``SET LOCAL synchronous_commit`` belong right after its BEGIN).

        A dead connection (server restarted) is dropped and the call retried once when
        ``work`` is safe to repeat or failed before its transaction began; a deadlock or
        serialization failure (rolled back as a whole) is retried too. While the server has
        not answered since the last failure, a direct connection attempt first makes an
        unreachable server fail fast instead of after the pool's ``timeout_s``.
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
                    if write:
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

    def _work(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        return self._run(fn, write=write)

    def _read(self, sql: str, args: Sequence[Any] = ()) -> builtins.list[tuple[Any, ...]]:
        return self._run(lambda conn: conn.execute(sql, args).fetchall(), write=False)

    def _migrate(self) -> None:
        """Create or upgrade the schema, one process at a time (transaction advisory lock)."""

        def work(conn: psycopg.Connection[Any]) -> tuple[int, int]:
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATION_LOCK,))
            conn.execute("CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL)")
            row = conn.execute("SELECT v FROM meta WHERE k = 'schema_version'").fetchone()
            version = int(row[0]) if row else 0
            for number, script in migrations("postgres"):
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

    # -- schedules -------------------------------------------------------------------------

    def create(self, items: Sequence[NewSchedule], *, now_ms: int) -> list[tuple[Schedule, bool]]:
        buckets = self.buckets

        def work(conn: psycopg.Connection[Any]) -> list[tuple[Schedule, bool]]:
            self._apply_durability(conn, all_relaxed(conn, POSTGRES,
                                                     {item.tenant for item in items}))
            out: list[tuple[Schedule, bool]] = []
            plain: list[tuple[Any, ...]] = []
            for item in items:
                values = insert_values(item, buckets=buckets, now_ms=now_ms)
                if item.key is None:
                    plain.append(values)
                    out.append((schedule_from_values(values, item), True))
                    continue
                # ON CONFLICT waits for a concurrent insert of the same key, then the SELECT
                # sees that row: two racing creates of one key resolve like a repeat.
                out.append(_create_keyed(conn, item, values, now_ms))
            if plain:
                _copy(conn, f"schedules ({INSERT_COLUMNS})", plain)
            return out

        return self._run(work)

    def _apply_durability(self, conn: psycopg.Connection[Any], relaxed: bool) -> None:
        """A relaxed tenant's transaction commits without waiting for the WAL flush; a strict
        one with the server's setting (``on`` unless the server was configured otherwise)."""
        if relaxed:
            conn.execute("SET LOCAL synchronous_commit = off")

    def get(self, schedule_id: str) -> Schedule:
        rows = self._read(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE id = %s",
                          (schedule_id,))
        if not rows:
            raise NotFoundError("schedule", schedule_id)
        return schedule_from_row(rows[0])

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
        where, args = list_filters("%s", status=status, channel=channel, due_from_ms=due_from_ms,
                                   due_to_ms=due_to_ms, after_id=after_id)
        rows = self._read(f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE {where} "
                          "ORDER BY id LIMIT %s", (*args, limit))
        return [schedule_from_row(r) for r in rows]

    def cancel(self, schedule_id: str, *, now_ms: int) -> Schedule:
        rows = self._run(lambda conn: conn.execute(
            "UPDATE schedules SET status = 'CANCELLED', next_ms = %s "
            f"WHERE id = %s AND status = 'PENDING' RETURNING {SCHEDULE_COLUMNS}",
            (now_ms, schedule_id)).fetchall())
        if rows:
            return schedule_from_row(rows[0])
        current = self.get(schedule_id)
        raise ConflictError(f"schedule {schedule_id} is {current.status.value}: too late to cancel",
                            status=current.status.value, ident=schedule_id)

    def reschedule(self, schedule_id: str, *, now_ms: int, due_ms: int | None = None,
                   payload: bytes | None = None, payload_kind: PayloadKind | None = None,
                   headers: dict[str, str] | None = None) -> Schedule:
        rows = self._run(lambda conn: conn.execute(
            "UPDATE schedules SET due_ms = coalesce(%s::bigint, due_ms), "
            "next_ms = coalesce(%s::bigint, next_ms), payload = coalesce(%s::bytea, payload), "
            "payload_kind = coalesce(%s::text, payload_kind), "
            "headers = coalesce(%s::text, headers) WHERE id = %s AND status = 'PENDING' "
            f"RETURNING {SCHEDULE_COLUMNS}",
            (due_ms, due_ms, payload, payload_kind.value if payload_kind else None,
             None if headers is None else json.dumps(headers), schedule_id)).fetchall())
        if rows:
            return schedule_from_row(rows[0])
        current = self.get(schedule_id)
        raise ConflictError(f"schedule {schedule_id} is {current.status.value}: too late to "
                            "change", status=current.status.value, ident=schedule_id)

    def halted_keys(self, *, tenant: str | None = None) -> builtins.list[HaltedKey]:
        rows = self._read(
            "SELECT tenant, ordering_key, schedule_id, halted_ms, reason FROM halted_keys "
            "WHERE %s::text IS NULL OR tenant = %s ORDER BY halted_ms", (tenant, tenant))
        return [HaltedKey(*r) for r in rows]

    def resume_key(self, *, tenant: str, ordering_key: str) -> None:
        gone = self._run(lambda conn: conn.execute(
            "DELETE FROM halted_keys WHERE tenant = %s AND ordering_key = %s",
            (tenant, ordering_key)).rowcount, idempotent=True)
        if not gone:
            raise NotFoundError("halted ordering key", ordering_key)

    def deliveries(self, schedule_id: str) -> builtins.list[Delivery]:
        rows = self._read(f"SELECT {DELIVERY_COLUMNS} FROM deliveries WHERE schedule_id = %s "
                          "ORDER BY started_ms, attempt", (schedule_id,))
        return [delivery_from_row(r) for r in rows]

    # -- channels --------------------------------------------------------------------------

    def put_channel(self, spec: ChannelSpec) -> ChannelSpec:
        self._run(lambda conn: conn.execute(
            "INSERT INTO channels VALUES (%s, %s, %s) ON CONFLICT (name) DO UPDATE "
            "SET kind = EXCLUDED.kind, config = EXCLUDED.config",
            (spec.name, spec.kind.value, json.dumps(spec.config))), idempotent=True)
        return spec

    def get_channel(self, name: str) -> ChannelSpec:
        rows = self._read("SELECT name, kind, config FROM channels WHERE name = %s", (name,))
        if not rows:
            raise NotFoundError("channel", name)
        return channel_from_row(rows[0])

    def list_channels(self) -> builtins.list[ChannelSpec]:
        rows = self._read("SELECT name, kind, config FROM channels ORDER BY name")
        return [channel_from_row(r) for r in rows]

    def delete_channel(self, name: str) -> None:
        deleted = self._run(lambda conn: conn.execute(
            "DELETE FROM channels WHERE name = %s", (name,)).rowcount)
        if deleted == 0:
            raise NotFoundError("channel", name)

    # -- dispatch --------------------------------------------------------------------------

    def next_epoch(self) -> int:
        # A transactional counter, not a SEQUENCE: a sequence's increments are not durable
        # until some later commit flushes them, so after a crash it could hand out an epoch twice.
        rows = self._run(lambda conn: conn.execute(
            "UPDATE meta SET v = (v::bigint + 1)::text WHERE k = 'epoch' RETURNING v").fetchall(),
            idempotent=True)
        return int(rows[0][0])

    def next_due_ms(self, *, now_ms: int, lease_ms: int) -> int | None:
        def work(conn: psycopg.Connection[Any]) -> tuple[Any, Any, int | None]:
            row = conn.execute(
                "SELECT (SELECT min(next_ms) FROM schedules WHERE status = 'PENDING' "
                "AND policy IS NULL), "
                "(SELECT min(claimed_ms) FROM schedules WHERE status = 'CLAIMED')").fetchone()
            assert row is not None
            return row[0], row[1], throttled_next_ms(conn, POSTGRES, now_ms=now_ms)

        pending, claimed, throttled = self._run(work, write=False)
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
        def work(conn: psycopg.Connection[Any]) -> builtins.list[tuple[Any, ...]]:
            # The marker first: a concurrent replay of this (epoch, range) waits on it.
            marked = conn.execute(
                "INSERT INTO claims VALUES (%s, %s, %s, %s) ON CONFLICT DO NOTHING",
                (epoch, bucket_lo, bucket_hi, now_ms)).rowcount
            if not marked:
                return conn.execute(
                    f"SELECT {CLAIM_COLUMNS} FROM schedules WHERE status = 'CLAIMED' "
                    "AND claim_epoch = %s AND bucket BETWEEN %s AND %s ORDER BY next_ms, id",
                    (epoch, bucket_lo, bucket_hi)).fetchall()
            rows = conn.execute(
                "WITH taken AS (UPDATE schedules SET claim_epoch = %s, claimed_ms = %s "
                "WHERE id IN (SELECT id FROM schedules WHERE status = 'CLAIMED' "
                "AND claimed_ms < %s AND bucket BETWEEN %s AND %s ORDER BY claimed_ms LIMIT %s "
                f"FOR UPDATE SKIP LOCKED) RETURNING {CLAIM_COLUMNS}, next_ms AS sort_ms) "
                "SELECT * FROM taken ORDER BY sort_ms, id",
                (epoch, now_ms, now_ms - lease_ms, bucket_lo, bucket_hi, limit)).fetchall()
            if len(rows) < limit:
                rows += conn.execute(
                    "WITH taken AS (UPDATE schedules SET status = 'CLAIMED', claim_epoch = %s, "
                    "claimed_ms = %s WHERE id IN (SELECT s.id FROM schedules s "
                    "WHERE s.status = 'PENDING' AND s.policy IS NULL "
                    "AND s.bucket BETWEEN %s AND %s "
                    f"AND s.next_ms <= %s AND {_HEAD} "
                    "ORDER BY s.next_ms LIMIT %s FOR UPDATE OF s SKIP LOCKED) "
                    f"RETURNING {CLAIM_COLUMNS}, next_ms AS sort_ms) "
                    "SELECT * FROM taken ORDER BY sort_ms, id",
                    (epoch, now_ms, bucket_lo, bucket_hi, until_ms, limit - len(rows))).fetchall()
            if len(rows) < limit:
                rows += claim_throttled(conn, POSTGRES, epoch=epoch, bucket_lo=bucket_lo,
                                        bucket_hi=bucket_hi, until_ms=until_ms, now_ms=now_ms,
                                        limit=limit - len(rows))
            return rows

        # Repeating a claim is a replay: it returns what the first run claimed.
        return [claimed_from_row(r) for r in self._run(work, idempotent=True)]

    def acknowledge(self, *, epoch: int, acks: Sequence[Ack], now_ms: int) -> int:
        if not acks:
            return 0
        delivered = [a.schedule_id for a in acks if a.status is Status.DELIVERED]
        retries = [(a.next_ms, a.error, a.schedule_id, epoch) for a in acks
                   if a.status is Status.PENDING]
        dead = [a for a in acks if a.status is Status.DEAD]
        buckets = self.buckets

        def work(conn: psycopg.Connection[Any]) -> int:
            applied = 0
            if delivered:
                applied += conn.execute(
                    # A join on the ids, not ``id = ANY(%s)``: under a cached generic plan
                    # the planner may scan the claimed rows and test each against the whole
                    # array (25 000 x 25 000 comparisons for one batch).
                    "UPDATE schedules s SET status = 'DELIVERED', attempts = s.attempts + 1, "
                    "delivered_ms = %s, last_error = NULL FROM unnest(%s::text[]) AS d(id) "
                    "WHERE s.id = d.id AND s.claim_epoch = %s AND s.status = 'CLAIMED'",
                    (now_ms, delivered, epoch)).rowcount
            if retries:
                with conn.cursor() as cur:
                    cur.executemany(
                        "UPDATE schedules SET status = 'PENDING', attempts = attempts + 1, "
                        "next_ms = %s, last_error = %s, claim_epoch = NULL, claimed_ms = NULL "
                        "WHERE id = %s AND claim_epoch = %s AND status = 'CLAIMED'", retries)
                    applied += cur.rowcount
            for ack in dead:
                row = conn.execute(
                    "UPDATE schedules SET status = 'DEAD', attempts = attempts + 1, "
                    "last_error = %s WHERE id = %s AND claim_epoch = %s AND status = 'CLAIMED' "
                    "RETURNING tenant, payload, payload_kind, headers, ordering_key",
                    (ack.error, ack.schedule_id, epoch)).fetchone()
                if row is None:
                    continue
                applied += 1
                if ack.halt and row[4]:
                    conn.execute("INSERT INTO halted_keys VALUES (%s, %s, %s, %s, %s) "
                                 "ON CONFLICT DO NOTHING",
                                 (row[0], row[4], ack.schedule_id, now_ms, ack.error))
                if ack.dead_letter:
                    item = dead_letter_item(ack, row, now_ms=now_ms)
                    conn.execute(_INSERT, insert_values(item, buckets=buckets, now_ms=now_ms))
            _copy(conn, f"deliveries ({DELIVERY_COLUMNS})", delivery_values(acks, epoch))
            if retries or dead:
                return_tokens(conn, POSTGRES, [a.delivery_id for a in acks
                                               if a.status is not Status.DELIVERED])
            return applied

        return self._run(work)

    # -- health and metrics ----------------------------------------------------------------

    def forget_claims(self, *, before_ms: int) -> int:
        deleted: int = self._run(lambda conn: conn.execute(
            "DELETE FROM claims WHERE claimed_ms < %s", (before_ms,)).rowcount, idempotent=True)
        return deleted

    def beat(self, component: str, *, now_ms: int, info: dict[str, Any] | None = None) -> None:
        self._run(lambda conn: conn.execute(
            "INSERT INTO beats VALUES (%s, %s, %s) ON CONFLICT (component) DO UPDATE "
            "SET at_ms = EXCLUDED.at_ms, info = EXCLUDED.info",
            (component, now_ms, json.dumps(info or {}))), idempotent=True)

    def last_beat(self, component: str) -> tuple[int, dict[str, Any]] | None:
        rows = self._read("SELECT at_ms, info FROM beats WHERE component = %s", (component,))
        return None if not rows else (int(rows[0][0]), json.loads(rows[0][1]))

    def counts(self) -> dict[Status, int]:
        return status_counts(self._read(COUNTS_SQL))

    def due_backlog(self, *, now_ms: int) -> int:
        rows = self._read(
            "SELECT count(*) FROM schedules WHERE status = 'PENDING' AND next_ms <= %s",
            (now_ms,))
        return int(rows[0][0])

    def ping(self) -> None:
        self._read("SELECT 1")


def _create_keyed(conn: psycopg.Connection[Any], item: NewSchedule, values: tuple[Any, ...],
                  now_ms: int) -> tuple[Schedule, bool]:
    """Insert a keyed item, or apply the reused-key rule to the schedule holding its key.
    ON CONFLICT waits for a concurrent insert of the same key, then the SELECT sees that row:
    two racing creates of one key resolve like a repeat."""
    for _ in range(2):
        inserted = conn.execute(
            f"{_INSERT} ON CONFLICT (tenant, key) WHERE key IS NOT NULL DO NOTHING",
            values).rowcount
        if inserted:
            return schedule_from_values(values, item), True
        row = conn.execute(
            f"SELECT {SCHEDULE_COLUMNS}, fingerprint FROM schedules "
            "WHERE tenant = %s AND key = %s FOR UPDATE", (item.tenant, item.key)).fetchone()
        assert row is not None
        existing = schedule_from_row(row[:-1])
        decision = key_decision(item, existing, row[-1], now_ms=now_ms)
        if decision is KeyDecision.REPEAT:
            return existing, False
        if decision is KeyDecision.OVERWRITE:
            updated = conn.execute(
                "UPDATE schedules SET payload = %s, payload_kind = %s, headers = %s, "
                f"fingerprint = %s WHERE id = %s RETURNING {SCHEDULE_COLUMNS}",
                (item.payload, item.payload_kind.value, json.dumps(item.headers),
                 item.fingerprint(), existing.id)).fetchone()
            assert updated is not None
            return schedule_from_row(updated), False
        conn.execute("UPDATE schedules SET key = NULL WHERE id = %s", (existing.id,))
    raise ConflictError(f"key {item.key!r} is contended; try again", ident=None)

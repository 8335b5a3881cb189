"""What every SQL role module builds on: the :class:`Dialect` and :class:`SqlBase`.

The statements are plain SQL that SQLite and PostgreSQL both read, written with ``?``
placeholders; a :class:`Dialect` supplies what the two spell differently. A backend provides
``_work(fn, write=...)``: run ``fn(conn)`` in one write transaction (or on a plain connection
to read), turning every driver error into :class:`~tocsin.errors.StoreError`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeVar

from tocsin.stores.rows import head_of_key

__all__ = ["POSTGRES", "SQLITE", "STALE_PAGES", "Dialect", "SqlBase", "executemany",
           "refresh_statistics", "sent", "tenant_is"]

T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Dialect:
    """What the two SQL dialects spell differently (every field named where it is built)."""

    mark: str
    """The driver's placeholder."""
    head: str
    """The ordering-key predicate (:func:`~tocsin.stores.rows.head_of_key`)."""
    skip_locked: str
    """Appended to a sub-select of candidate schedules (aliased ``s``) to be claimed."""
    lock_policy: str
    """Appended to the select of the policies (aliased ``p``) a claim takes tokens from."""
    lock_row: str
    """Appended to a select of one row about to be changed in the same transaction."""
    blob: str
    """The type of a byte string (for a ``CAST`` of a parameter that may be NULL)."""
    by_finish: str = ""
    """Appended to ``schedules`` in a read of finished schedules by a range of when they
    finished (see :func:`~tocsin.stores.sql.stats.finished_rows`)."""
    analyze: str = ""
    """Refreshes the planner's statistics of the schedules and their attempts (empty: none
    needed)."""
    arrays: bool = False
    """Whether a list of values travels as one array parameter (see :meth:`member`)."""
    stale: str = ""
    """Whether the schedules table holds more pages than its one parameter and twice as many
    as when its statistics were taken (empty: the planner needs no statistics)."""
    insert_first: bool = False
    """Whether a bulk create of keyed schedules inserts them first, skipping the keys already
    held, and looks keys up only when some were (see
    :func:`~tocsin.stores.sql.bulk.create_keyed`): with one writer at a time, a lookup of
    every key would hold up every other writer. PostgreSQL looks first: its bulk path, COPY,
    cannot skip a row."""
    unflushed: str = ""
    """Run first in a transaction whose loss in a crash does no harm (the archive's deletes:
    rows lost to a crash are archived again by the next run): its commit does not wait for
    the log's flush to disk. Empty where commits do not wait anyway (SQLite: ``NORMAL``)."""
    walk: bool = False
    """Whether the claim walks the destinations whose wake-up time has come one index seek at
    a time (see :func:`~tocsin.stores.sql.fair.due_destinations`) rather than as one range,
    because the planner may not take the index for the range (PostgreSQL, by its statistics)."""
    one_writer: bool = False
    """Whether the database takes one writing transaction at a time (SQLite): a job's deletes
    run as one task, as more would only queue for the writer."""
    per_row: str = ""
    """Ends the correlated sub-select of an ``EXISTS`` that must stay a test of each row (a
    filter of the scan), never become a join (PostgreSQL does not pull up a sub-select with an
    ``OFFSET``). Planned as a hash anti-join, whose rows come out in no order, the claim's
    tests of a candidate's channel (:func:`~tocsin.stores.sql.operations.not_paused`) made
    PostgreSQL read every candidate of a destination up to the due time and sort them, where
    the index gives them in order and the limit stops at the first: the window's peek of a
    destination with 180 candidates due read 370 buffers (0.2 ms), now 7."""
    sends_ahead: bool = False
    """Whether a statement's rows can be read after later statements went out (psycopg: a
    cursor keeps its result, and in a pipeline a statement is sent with the next one read):
    see :func:`sent`. A SQLite cursor reads its rows as they are asked for, so a write in
    between would change what it reads."""

    def q(self, sql: str) -> str:
        """``sql`` written with ``?`` placeholders, in this dialect."""
        return sql if self.mark == "?" else sql.replace("?", self.mark)

    def among(self, candidates: str) -> str:
        """The claim's test that a row is one of ``candidates`` (a select of ids, locking
        them): ``id IN (...)``, or ``id = ANY(ARRAY(...))`` where arrays travel, so that the
        candidates are taken once, first, and each row is then found by its key. As a
        semi-join, PostgreSQL planned the claim as a sequential scan of the whole table
        probing the candidates, while a burst of 100 000 schedules was pending: 2 s a claim,
        and a victim tenant's webhooks 4.5 s late."""
        if self.arrays:
            return f"id = ANY(ARRAY({candidates}))"
        return f"id IN ({candidates})"

    def member(self, values: Sequence[Any]) -> tuple[str, tuple[Any, ...]]:
        """``values`` as the right side of a membership test, and its arguments: ``= ANY(%b)``
        with one array parameter (sent in binary, which spares the driver quoting each value
        as text: 1.6 -> 0.6 us a value; planned as a lookup of each value), or ``IN (?, ...)``
        with one parameter each (a few thousand at most)."""
        if self.arrays:
            return "= ANY(%b)", (list(values),)
        return f"IN ({', '.join('?' * len(values))})", tuple(values)


SQLITE = Dialect(mark="?", head=head_of_key("rowid"), skip_locked="", lock_policy="",
                 lock_row="", blob="BLOB", by_finish=" INDEXED BY schedules_finished",
                 insert_first=True, one_writer=True)
"""SQLite: one writer at a time, so no row locks are needed. Without statistics its planner
reads finished schedules through ``schedules_done`` (status, channel), every one of them, when
a range of ``schedules_finished`` holds the few asked for: it is told the index."""
POSTGRES = Dialect(mark="%s", head=head_of_key("seq"), skip_locked=" FOR UPDATE OF s SKIP LOCKED",
                   lock_policy=" FOR UPDATE OF p", lock_row=" FOR UPDATE", blob="BYTEA",
                   analyze="ANALYZE schedules, deliveries", arrays=True,
                   unflushed="SET LOCAL synchronous_commit = off", walk=True, sends_ahead=True,
                   per_row=" OFFSET 0",
                   stale="SELECT pg_relation_size(oid) / current_setting('block_size')::int "
                         "> greatest(%s, 2 * relpages) FROM pg_class "
                         "WHERE oid = 'schedules'::regclass")
"""PostgreSQL: a claim locks the policies it takes tokens from, so concurrent claims in other
bucket ranges or other dispatchers wait and then count the tokens just taken."""


def tenant_is(column: str = "tenant") -> str:
    """A predicate true for any row when its two parameters (both the tenant) are NULL, else
    for rows of that tenant: the ``tenant=`` filter of reads and changes."""
    return f"(CAST(? AS TEXT) IS NULL OR {column} = ?)"


STALE_PAGES = 256
"""A schedules table of fewer pages (2 MB, some 10 000 schedules) never has stale statistics
(see :func:`refresh_statistics`)."""


def refresh_statistics(store: SqlBase, *, when_stale: bool = False) -> bool:
    """Refresh the planner's statistics of the schedules and their attempts (PostgreSQL; SQLite
    needs none); whether it did. ``when_stale``: only when the table has grown to twice the
    pages they were taken on (and beyond :data:`STALE_PAGES`). A bulk load outgrows them long
    before autovacuum looks again (up to a minute later); with statistics of a table a tenth
    its size, or none, a lookup of a few hundred keys reads every row of the tenant instead of
    the key index, and each chunk of a load takes longer than the one before."""
    d = store._dialect
    if not d.analyze:
        return False
    if when_stale:
        row = store._rows(d.stale, (STALE_PAGES,))
        if not row or not row[0][0]:
            return False
    store._work(lambda conn: conn.execute(d.analyze), idempotent=True)
    return True


def sent(conn: Any, d: Dialect, sql: str,
         args: Sequence[Any] = ()) -> Callable[[], list[tuple[Any, ...]]]:
    """Send one statement (in dialect ``d``) now, and read its rows when the function returned
    is called: in a pipeline (see :meth:`SqlBase._work`) it goes out with the next statement
    whose rows are read, one round trip for both, where ``d.sends_ahead``; elsewhere it is
    read now."""
    cursor = conn.execute(sql, args)
    if d.sends_ahead:
        return cache(cursor.fetchall)  # read once, however often asked
    rows = cursor.fetchall()
    return lambda: rows


def executemany(conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> int:
    """``executemany`` on a sqlite3 or a psycopg connection; how many rows it changed."""
    if not rows:
        return 0
    if hasattr(conn, "executemany"):
        return int(conn.executemany(sql, rows).rowcount)
    with conn.cursor() as cur:
        cur.executemany(sql, rows)
        return int(cur.rowcount)


class SqlBase:
    """The plumbing every role mixin uses; a backend overrides :meth:`_work`,
    :meth:`_tenant_work` and :meth:`_insert_many`."""

    _dialect: Dialect
    buckets: int

    def _work(self, fn: Callable[[Any], T], *, write: bool = True,
              idempotent: bool = False, urgent: bool = False, pipelined: bool = False) -> T:
        """Run ``fn(conn)`` in one write transaction (``write``) or on a reading connection.
        ``idempotent``: ``fn`` is safe to run twice (a backend may retry it after a lost
        connection). ``urgent``: a write someone's due schedule waits for (a claim), which
        a backend with one writer at a time lets go first. ``pipelined``: ``fn``'s statements
        may go out ahead of their results (PostgreSQL's pipeline mode), each with the next one
        whose rows are read (:func:`sent`): ``fn`` reads no ``rowcount`` before the rows, and
        uses no ``COPY`` and no savepoint."""
        raise NotImplementedError

    def _tenant_work(self, fn: Callable[[Any], T], *, tenants: frozenset[str],
                     flush: bool = True) -> T:
        """Run ``fn(conn)`` in one write transaction made on tenants' behalf: committed
        without waiting for the flush when every tenant in ``tenants`` is configured
        ``relaxed``, strictly otherwise (an empty set: strictly). ``flush=False``: without
        waiting whatever the tenants, where the backend can (PostgreSQL); the caller makes
        it durable later with :meth:`_flush_commits`, before it reports the work done."""
        raise NotImplementedError

    def _flush_commits(self) -> None:
        """Make every transaction committed before this call durable (those of
        ``_tenant_work(flush=False)``); a backend that never defers the flush does nothing."""

    def _insert_many(self, conn: Any, target: str, rows: Sequence[Sequence[Any]]) -> None:
        """Insert ``rows`` into ``target`` (``table (columns)``) inside ``conn``'s
        transaction: the bulk path."""
        raise NotImplementedError

    def _insert_new(self, conn: Any, target: str, rows: Sequence[Sequence[Any]]) -> bool:
        """:meth:`_insert_many` of rows none of whose keys is held; False, having inserted
        none (and the transaction still usable), when one of them is."""
        raise NotImplementedError

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """The rows of one read."""
        sql = self._dialect.q(sql)
        return self._work(lambda conn: [tuple(r) for r in conn.execute(sql, args).fetchall()],
                          write=False)

    def _single(self, fn: Callable[[Any], T], *, idempotent: bool = False,
                urgent: bool = False) -> T:
        """Run ``fn(conn)``, which runs one write statement, as its own transaction: a backend
        whose explicit transaction costs round trips (PostgreSQL: BEGIN and COMMIT, each
        waiting for the server) runs the statement alone; by default, :meth:`_work`."""
        return self._work(fn, idempotent=idempotent, urgent=urgent)

    def _write(self, sql: str, args: Sequence[Any] = (), *,
               idempotent: bool = False) -> list[tuple[Any, ...]]:
        """The rows one write statement returns (``RETURNING``), in its own transaction."""
        sql = self._dialect.q(sql)
        return self._single(lambda conn: [tuple(r) for r in conn.execute(sql, args).fetchall()],
                            idempotent=idempotent)

    def _changed(self, sql: str, args: Sequence[Any] = (), *, idempotent: bool = False,
                 urgent: bool = False) -> int:
        """How many rows one write statement changed, in its own transaction."""
        sql = self._dialect.q(sql)
        return self._single(lambda conn: int(conn.execute(sql, args).rowcount),
                            idempotent=idempotent, urgent=urgent)

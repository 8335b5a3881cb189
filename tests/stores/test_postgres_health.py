"""PostgreSQL over time (schema 16): names compare in "C" in a database created with a
linguistic locale; the claim reads the destination indexes whether the planner's statistics
are absent, stale or fresh, and a destination's candidates in their order, up to its limit;
and a transaction held open elsewhere, which keeps every claimed row's dead index entries,
does not make the claim read them."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from tocsin.domain import Status
from tocsin.stores.postgres import PostgresStore
from tocsin.stores.sql.base import POSTGRES
from tocsin.stores.sql.dispatch import destination_candidates
from tocsin.stores.sql.fair import listing

from .test_store import NOW, ack, claim, new

BUCKETS = 16
_NAMES = {"schedules": ("tenant", "channel", "key", "ordering_key", "policy"),
          "destinations": ("tenant", "channel"), "halted_keys": ("tenant", "ordering_key"),
          "recurring": ("tenant", "channel", "policy"), "tenants": ("name",)}


@pytest.fixture
def linguistic_url(postgres_url: str) -> Iterator[str]:
    """A new database whose default collation is linguistic (ICU's en-US: 'a' < 'B'), dropped
    afterwards."""
    name = f"tocsin_icu_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name} TEMPLATE template0 LOCALE_PROVIDER icu "
                     "ICU_LOCALE 'en-US' LOCALE 'C.utf8'")
    url = re.sub(r"/[^/?]*(\?|$)", rf"/{name}\1", postgres_url.split("://", 1)[1], count=1)
    yield f"{postgres_url.split('://', 1)[0]}://{url}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP DATABASE {name} WITH (FORCE)")


def _one(url: str, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one statement (none for a command)."""
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, args)
        return cur.fetchall() if cur.description else []


def test_names_compare_in_c_in_a_linguistic_database(linguistic_url: str) -> None:
    assert _one(linguistic_url, "SELECT 'a' < 'B'") == [(True,)], "the database is linguistic"
    store = PostgresStore(linguistic_url, buckets=BUCKETS)
    try:
        store.create([new(NOW - 10, tenant=t) for t in ("a", "B", "_b")], now_ms=NOW - 100)
        for table, columns in _NAMES.items():
            found = dict(_one(linguistic_url,
                              "SELECT a.attname, c.collname FROM pg_attribute a "
                              "JOIN pg_collation c ON c.oid = a.attcollation "
                              "WHERE a.attrelid = %s::regclass AND a.attnum > 0", (table,)))
            assert {found[c] for c in columns} == {"C"}, table
        # every index of the schedules and the destinations, rebuilt in "C" (0: not text)
        indexes = _one(linguistic_url,
                       "SELECT i.indexrelid::regclass::text, c.collname FROM pg_index i "
                       "CROSS JOIN LATERAL unnest(i.indcollation::oid[]) AS u(coll) "
                       "JOIN pg_collation c ON c.oid = u.coll "
                       "WHERE i.indrelid IN ('schedules'::regclass, 'destinations'::regclass)")
        assert {"schedules_dest", "schedules_key", "destinations_wake"} <= {i for i, _ in indexes}
        assert {c for _, c in indexes} == {"C"}
        assert [t for (t,) in _one(linguistic_url, "SELECT tenant FROM schedules "
                                   "ORDER BY tenant")] == ["B", "_b", "a"], "byte order"
        assert sorted(r.tenant for r in claim(store, store.next_epoch())) == ["B", "_b", "a"]
        assert "schedules_dest" in _plan(linguistic_url, "t")
    finally:
        store.close()


def _plan(url: str, tenant: str, *, generic: bool = False, analyze: bool = False,
          floor: int | None = None, until_ms: int = NOW, limit: int = 100,
          column: str = "id", lock: bool = False) -> str:
    """The plan of one destination's candidates (the claim's read of ``schedules_dest``, or
    with ``column`` ``next_ms`` the window's peek)."""
    sql = destination_candidates(POSTGRES, column, lock=lock)
    with psycopg.connect(url, autocommit=True) as conn:
        if floor is None:
            rows = conn.execute("SELECT wake_ms FROM destinations WHERE tenant = %s "
                                "AND channel = 'out'", (tenant,)).fetchall()
            floor = int(rows[0][0]) if rows else 0
        args = (0, BUCKETS - 1, until_ms, tenant, "out", floor, limit)
        return _explain(conn, POSTGRES.q(sql), args, generic=generic, analyze=analyze)


def _explain(conn: psycopg.Connection[Any], sql: str, args: tuple[Any, ...], *,
             generic: bool, analyze: bool = False) -> str:
    """EXPLAIN of ``sql`` (``%s`` placeholders): with these values (a custom plan), or the
    plan PostgreSQL caches for any values (``generic``)."""
    options = "ANALYZE, BUFFERS, " if analyze else ""
    if not generic:
        return "\n".join(r[0] for r in conn.execute(f"EXPLAIN ({options}COSTS OFF) {sql}",
                                                    args).fetchall())
    numbered = iter(range(1, len(args) + 1))
    conn.execute("SET plan_cache_mode = force_generic_plan")
    conn.execute("PREPARE q AS " + re.sub("%s", lambda _: f"${next(numbered)}", sql))
    try:
        literals = ", ".join(str(a) if isinstance(a, int) else f"'{a}'" for a in args)
        return "\n".join(r[0] for r in conn.execute(
            f"EXPLAIN ({options}COSTS OFF) EXECUTE q({literals})").fetchall())
    finally:
        conn.execute("DEALLOCATE q")
        conn.execute("RESET plan_cache_mode")


def _listing_plan(url: str, *, generic: bool) -> str:
    sql, args = listing(POSTGRES, NOW)
    with psycopg.connect(url, autocommit=True) as conn:
        return _explain(conn, sql, args, generic=generic)


@pytest.mark.parametrize("statistics", ["absent", "stale", "fresh"])
def test_the_claim_reads_the_destination_indexes(postgres_store_url: str,
                                                 statistics: str) -> None:
    """Idle destinations and a burst beside a trickle, the planner's statistics taken never,
    before the burst, or after it: the listing walks ``destinations_wake`` and each
    destination's share is read from ``schedules_dest``, with custom and generic plans."""
    store = PostgresStore(postgres_store_url, buckets=BUCKETS)
    try:
        store.open()
        _one(postgres_store_url, "ALTER TABLE schedules SET (autovacuum_enabled = off)")
        _one(postgres_store_url, "ALTER TABLE destinations SET (autovacuum_enabled = off)")
        store.create([new(NOW + 86_400_000 + i, tenant=f"idle{i % 50}", channel=f"c{i}")
                      for i in range(3_000)], now_ms=NOW)
        if statistics == "stale":
            _one(postgres_store_url, "ANALYZE schedules, destinations")
        store.create([new(NOW - 1_000, tenant="big") for _ in range(20_000)], now_ms=NOW - 2_000)
        store.create([new(NOW - 10, tenant="small")], now_ms=NOW - 2_000)
        if statistics == "fresh":
            _one(postgres_store_url, "ANALYZE schedules, destinations")
        for generic in (False, True):
            for tenant in ("small", "big"):
                plan = _plan(postgres_store_url, tenant, generic=generic)
                assert "schedules_dest" in plan and "Seq Scan on schedules" not in plan, plan
            plan = _listing_plan(postgres_store_url, generic=generic)
            assert "destinations_wake" in plan and "Seq Scan on destinations" not in plan, plan
            assert "Seq Scan on schedules" not in plan, plan
        assert {r.tenant for r in claim(store, store.next_epoch(), limit=100)} == {"big",
                                                                                   "small"}
    finally:
        store.close()


def _buffers(plan: str) -> int:
    """The shared buffers an EXPLAIN (ANALYZE, BUFFERS) read or hit, at its top node."""
    found = re.search(r"Buffers: shared hit=(\d+)(?: read=(\d+))?", plan)
    assert found, plan
    return int(found[1]) + int(found[2] or 0)


@pytest.mark.parametrize("statistics", ["absent", "fresh"])
def test_a_destination_s_candidates_stop_at_the_limit(postgres_store_url: str,
                                                      statistics: str) -> None:
    """The window's peek (the first candidate) and a claim's share read a destination's
    candidates in the index's order and stop at the limit, with custom and generic plans:
    the tests of their channel (paused, held) are made of each row. Planned as a hash
    anti-join, whose rows come in no order, the 180 candidates due in the window were all read
    and sorted: 370 buffers for the first."""
    store = PostgresStore(postgres_store_url, buckets=BUCKETS)
    try:
        store.open()
        _one(postgres_store_url, "ALTER TABLE schedules SET (autovacuum_enabled = off)")
        store.create([new(NOW + 5 * i, tenant="t") for i in range(2_000)], now_ms=NOW - 1_000)
        if statistics == "fresh":
            _one(postgres_store_url, "ANALYZE schedules, destinations")
        for generic in (False, True):
            for column, lock in (("next_ms", False), ("id", True)):
                plan = _plan(postgres_store_url, "t", generic=generic, analyze=True,
                             until_ms=NOW + 900, limit=1, column=column, lock=lock)
                assert "Sort" not in plan and _buffers(plan) < 20, plan
    finally:
        store.close()


def test_a_held_transaction_does_not_slow_the_claim(postgres_store_url: str) -> None:
    """A transaction held open elsewhere keeps the index entries of every row claimed and
    acknowledged since (they are dead to everyone else, not to it). The claim seeks a
    destination from its wake-up time, after them."""
    store = PostgresStore(postgres_store_url, buckets=BUCKETS)
    try:
        store.create([new(NOW + 60_000, tenant="t")], now_ms=NOW)
        with psycopg.connect(postgres_store_url) as held:
            held.execute("SELECT txid_current()")
            store.create([new(NOW - 20_000 + i, tenant="t") for i in range(20_000)],
                          now_ms=NOW - 30_000)
            while rows := claim(store, store.next_epoch(), limit=1_000):
                store.acknowledge(epoch=rows[0].epoch, now_ms=NOW,
                                  acks=[ack(r, Status.DELIVERED) for r in rows])
            dead = _one(postgres_store_url, "SELECT n_dead_tup FROM pg_stat_user_tables "
                        "WHERE relname = 'schedules'")
            skipped = _buffers(_plan(postgres_store_url, "t", analyze=True))
            walked = _buffers(_plan(postgres_store_url, "t", analyze=True, floor=0))
            assert walked > 100 and skipped < 20, (dead, skipped, walked)
            store.create([new(NOW - 5, tenant="t")], now_ms=NOW - 10)
            assert store.next_due_ms(now_ms=NOW, lease_ms=10**9) == NOW - 5
            assert [r.due_ms for r in claim(store, store.next_epoch())] == [NOW - 5]
            held.rollback()
        assert store.next_due_ms(now_ms=NOW, lease_ms=10**9) == NOW + 60_000
    finally:
        store.close()

"""What only the PostgreSQL store has: per-process pools (pickle, fork), failing clearly when
the server is away, and recovering when it is back."""

from __future__ import annotations

import multiprocessing
import pickle
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from tocsin.domain import NewSchedule, Status
from tocsin.errors import StoreError
from tocsin.stores import open_store
from tocsin.stores.postgres import PostgresStore
from tocsin.testing.postgres import create_schema, throwaway_server

NOW = 1_700_000_000_000


def new(due_ms: int = NOW) -> NewSchedule:
    return NewSchedule(channel="out", payload=b"1", due_ms=due_ms)


@pytest.fixture
def pg(postgres_store_url: str) -> Iterator[PostgresStore]:
    store = PostgresStore(postgres_store_url, buckets=8)
    yield store
    store.close()


def test_construction_does_no_io() -> None:
    store = PostgresStore("postgresql://nobody@127.0.0.1:1/none", buckets=8, timeout_s=1)
    copy = pickle.loads(pickle.dumps(store))
    assert copy.url == store.url
    assert store._pool is None and copy._pool is None


def test_unreachable_server_is_a_store_error() -> None:
    started = time.monotonic()
    with pytest.raises(StoreError, match=r"127\.0\.0\.1:1/none.*(refused|connect)"):
        PostgresStore("postgresql://nobody:secret@127.0.0.1:1/none", timeout_s=1).open()
    assert time.monotonic() - started < 15
    with pytest.raises(StoreError) as info:
        open_store("postgresql://nobody:secret@127.0.0.1:1/none")
    assert "secret" not in str(info.value)


def test_pickled_copy_opens_its_own_pool(pg: PostgresStore) -> None:
    [(made, _)] = pg.create([new()], now_ms=NOW)
    copy = pickle.loads(pickle.dumps(pg))
    try:
        assert copy.buckets == 8 and copy.get(made.id) == made
        assert copy._pool is not pg._pool
    finally:
        copy.close()
    assert pg.get(made.id) == made


def _use_in_child(store: PostgresStore, schedule_id: str) -> None:
    store.cancel(schedule_id, now_ms=NOW)
    store.next_epoch()


def test_fork_uses_new_connections(pg: PostgresStore) -> None:
    [(made, _)] = pg.create([new()], now_ms=NOW)
    epoch = pg.next_epoch()
    child = multiprocessing.get_context("fork").Process(target=_use_in_child, args=(pg, made.id))
    child.start()
    child.join(60)
    assert child.exitcode == 0
    # the parent's connections were left alone by the child
    assert pg.get(made.id).status is Status.CANCELLED
    assert pg.next_epoch() == epoch + 2


def test_recovers_when_connections_are_killed(postgres_url: str) -> None:
    name = f"tocsin-test-{uuid.uuid4().hex[:8]}"
    url = f"{create_schema(postgres_url)}&application_name={name}"
    store = PostgresStore(url, buckets=8, min_size=3)
    try:
        [(made, _)] = store.create([new()], now_ms=NOW)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            killed = admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                   "WHERE application_name = %s", (name,)).fetchone()
        assert killed is not None and killed[0] >= 1
        time.sleep(0.2)
        assert store.get(made.id) == made  # a read, retried
        assert store.create([new()], now_ms=NOW)[0][1]  # a write, failed before BEGIN: retried
        assert store.counts()[Status.PENDING] == 2
    finally:
        store.close()


def test_server_restart() -> None:
    with throwaway_server() as server:
        store = PostgresStore(server.url, buckets=8, timeout_s=2)
        try:
            [(made, _)] = store.create([new()], now_ms=NOW)
            server.stop()
            with pytest.raises(StoreError, match=r"cannot connect|no connection"):
                store.get(made.id)
            server.start()
            assert store.get(made.id) == made
            assert store.create([new()], now_ms=NOW)[0][1]
            epoch = store.next_epoch()
            assert len(store.claim(epoch=epoch, bucket_lo=0, bucket_hi=7, until_ms=NOW,
                                   now_ms=NOW, lease_ms=1000, limit=10)) == 2
        finally:
            store.close()


def test_connections_run_without_jit_unless_the_url_sets_it() -> None:
    """Beside a burst the claim's estimated cost passed jit_above_cost and PostgreSQL spent
    seconds compiling it; Tocsin's connections add ``-c jit=off`` unless the URL's options
    set ``jit`` themselves (a setting, not any word holding the letters)."""
    from tocsin.stores.postgres import jit_off

    assert jit_off("") == "-c jit=off"
    assert jit_off("-c search_path=a") == "-c search_path=a -c jit=off"
    assert jit_off("-c application_name=jitney") == "-c application_name=jitney -c jit=off"
    assert jit_off("-c foo.jit=1") == "-c foo.jit=1 -c jit=off"
    for own in ("-c jit=on", "-c jit = on", "-cjit=on", "--jit=on", "-c a=b -c jit=on"):
        assert jit_off(own) == own


def _record_commit_level(pg: PostgresStore, table: str) -> None:
    """A trigger that notes, for each statement writing ``table``, the ``synchronous_commit``
    its transaction commits with."""
    pg.open()
    with psycopg.connect(pg.url, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS commit_levels (tab TEXT, level TEXT)")
        conn.execute("CREATE OR REPLACE FUNCTION note_commit_level() RETURNS trigger "
                     "LANGUAGE plpgsql AS $$ BEGIN INSERT INTO commit_levels VALUES "
                     "(TG_TABLE_NAME, current_setting('synchronous_commit')); RETURN NULL; "
                     "END $$")
        conn.execute(f"CREATE TRIGGER note_{table} AFTER INSERT ON {table} "
                     "FOR EACH STATEMENT EXECUTE FUNCTION note_commit_level()")


def _commit_levels(pg: PostgresStore) -> list[tuple[str, str]]:
    with psycopg.connect(pg.url, autocommit=True) as conn:
        return [(str(t), str(v)) for t, v in conn.execute(
            "SELECT tab, level FROM commit_levels").fetchall()]


def _meta_keys(pg: PostgresStore) -> list[str]:
    return [str(r[0]) for r in pg._rows("SELECT k FROM meta WHERE k IN ('x1', 'x2') ORDER BY k")]


def test_a_pipelined_transaction_is_one_transaction(pg: PostgresStore) -> None:
    """A pipelined transaction (a claim's: statements sent ahead of their results) commits
    the statements it never read with the rest, and rolls them all back when one fails, read
    or not, or when its own code fails; its connection serves the next call."""
    from typing import Any

    def run(*statements: str, fail: bool = False) -> None:
        def work(conn: Any) -> None:
            for sql in statements:
                cursor = conn.execute(sql)  # never read, except a SELECT
                if sql.startswith("SELECT"):
                    cursor.fetchall()
            if fail:
                raise ValueError("the work's own code failed")

        pg._work(work, pipelined=True)

    pg.open()
    with pytest.raises(StoreError, match="division by zero"):
        run("INSERT INTO meta VALUES ('x1', '')", "SELECT 1 / 0", "SELECT 1")
    with pytest.raises(StoreError, match="duplicate key"):  # found only at COMMIT
        run("INSERT INTO meta VALUES ('x1', '')", "INSERT INTO meta VALUES ('x1', '')")
    with pytest.raises(ValueError):
        run("INSERT INTO meta VALUES ('x1', '')", fail=True)
    assert _meta_keys(pg) == []
    run("INSERT INTO meta VALUES ('x1', '')", "SELECT 1", "INSERT INTO meta VALUES ('x2', '')")
    assert _meta_keys(pg) == ["x1", "x2"]


def test_verdicts_commit_unflushed_creates_and_claims_flushed(pg: PostgresStore) -> None:
    """An acknowledgement commits without waiting for the WAL flush (a lost one is sent again
    under the same delivery id); a strict tenant's create and a claim (the compare-and-set a
    cancel races) wait for it."""
    from tocsin.domain import Ack, Outcome

    for table in ("schedules", "deliveries", "claims"):
        _record_commit_level(pg, table)
    [(made, _)] = pg.create([new(NOW - 1)], now_ms=NOW - 10)
    epoch = pg.next_epoch()
    [row] = pg.claim(epoch=epoch, bucket_lo=0, bucket_hi=7, until_ms=NOW, now_ms=NOW,
                     lease_ms=60_000, limit=10)
    assert pg.acknowledge(epoch=epoch, now_ms=NOW + 5, acks=[Ack(
        schedule_id=row.id, delivery_id=f"{row.id}-1", attempt=1, outcome=Outcome.DELIVERED,
        error=None, started_ms=NOW, ended_ms=NOW + 5, due_ms=row.due_ms,
        status=Status.DELIVERED)]) == 1
    assert _commit_levels(pg) == [("schedules", "on"), ("claims", "on"), ("deliveries", "off")]
    assert pg.get(made.id).status is Status.DELIVERED
    [logged] = pg.deliveries(made.id)
    assert (logged.delivery_id, logged.epoch, logged.error) == (f"{made.id}-1", epoch, None)


def test_acknowledgement_finds_its_rows_by_id_without_statistics(pg: PostgresStore) -> None:
    """With no statistics yet (a store that just took its first rows), acknowledging a few
    of 2 000 claimed schedules reads them through the primary key, not every claimed row
    through ``schedules_lease`` (15 ms for 5 rows, compared with each id), and 1 000 of them
    are not joined to the claimed rows by a nested loop (1.6 s)."""
    from tocsin.stores.postgres import delivered_ack

    made = pg.create([new(NOW - 3_000 + i) for i in range(2_000)], now_ms=NOW - 4_000)
    epoch = pg.next_epoch()
    claimed = pg.claim(epoch=epoch, bucket_lo=0, bucket_hi=7, until_ms=NOW, now_ms=NOW,
                       lease_ms=60_000, limit=2_000)
    assert len(claimed) == len(made) == 2_000
    with psycopg.connect(pg.url, autocommit=True) as conn:
        assert conn.execute("SELECT last_analyze, last_autoanalyze FROM pg_stat_user_tables "
                            "WHERE relid = 'schedules'::regclass").fetchone() == (None, None)
        for n in (5, 1_000):
            ids = [r.id for r in claimed[:n]]
            rows = [(f"{i}-1", i, 1, epoch, NOW, NOW + 1, "delivered", None, 1) for i in ids]
            sql, args = delivered_ack(ids, rows, {("deliveries", "{}"): n}, epoch=epoch,
                                      now_ms=NOW)
            plan = "\n".join(r[0] for r in conn.execute("EXPLAIN " + sql, args).fetchall())
            update = plan.split("CTE logged")[0]
            assert "schedules_lease" not in update and "Nested Loop" not in update, plan
            if n == 5:
                assert "schedules_pkey" in update, plan

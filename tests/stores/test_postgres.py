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

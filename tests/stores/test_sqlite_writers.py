"""SQLite's one writer at a time: a claim (an urgent write) goes before the other writers
waiting for the lock, of its own process or of others (whichever the kernel wakes first, a
writer that is not urgent lets the lock go again while a claim waits)."""

from __future__ import annotations

import json
import multiprocessing
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.support.statements import StatementLog
from tocsin.stores.sqlite import SQLiteStore

SETTLE_S = 0.3
"""Time for the waiting writers to reach their wait (the order they reach it in is the one
being tested, so each is started only after the last has settled)."""


def _write(store: SQLiteStore, name: str, order: list[str], *, urgent: bool) -> None:
    def work(conn: object) -> None:
        order.append(name)

    store._work(work, urgent=urgent)


@contextmanager
def _writer_held(store: SQLiteStore) -> Iterator[None]:
    """Hold the store's writer (another thread's write) until the block ends."""
    release, holding = threading.Event(), threading.Event()

    def hold(conn: object) -> None:
        holding.set()
        release.wait(10)

    holder = threading.Thread(target=store._work, args=(hold,))
    holder.start()
    holding.wait(10)
    try:
        yield
    finally:
        release.set()
        holder.join(10)


def test_a_claim_goes_before_writers_that_waited_longer(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    order: list[str] = []
    with _writer_held(store):
        waiters = []
        for name, urgent in (("ack-1", False), ("ack-2", False), ("claim", True)):
            waiters.append(threading.Thread(target=_write, args=(store, name, order),
                                            kwargs={"urgent": urgent}))
            waiters[-1].start()
            time.sleep(SETTLE_S)
    for t in waiters:
        t.join(10)
    assert order[0] == "claim" and sorted(order[1:]) == ["ack-1", "ack-2"]
    store.close()


def _write_in_process(path: str, name: str, urgent: bool, opened: Any, go: Any) -> None:
    store = SQLiteStore(path, buckets=4)  # opened before the lock is held: opening writes
    opened.set()
    go.wait(30)

    def work(conn: object) -> None:
        conn.execute("INSERT INTO meta VALUES (?, ?)",  # type: ignore[attr-defined]
                     (f"order-{time.monotonic_ns()}", name))

    store._work(work, urgent=urgent)
    store.close()


def test_a_claim_goes_before_other_processes_writers(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    store = SQLiteStore(path, buckets=4)
    spawn = multiprocessing.get_context("spawn")  # no SQLite state carried over a fork
    writers = []
    for name, urgent in (("ack-1", False), ("ack-2", False), ("claim", True)):
        opened, go = spawn.Event(), spawn.Event()
        writers.append((spawn.Process(target=_write_in_process,
                                      args=(path, name, urgent, opened, go)), opened, go))
        writers[-1][0].start()
    for _, opened, _ in writers:
        assert opened.wait(60)
    with _writer_held(store):
        for _, _, go in writers:  # each reaches its wait before the next starts
            go.set()
            time.sleep(SETTLE_S)
    for process, _, _ in writers:
        process.join(30)
        assert process.exitcode == 0
    order = [r[0] for r in store._rows("SELECT v FROM meta WHERE k LIKE 'order-%' ORDER BY k")]
    assert order[0] == "claim" and sorted(order[1:]) == ["ack-1", "ack-2"]
    store.close()


def test_a_writer_that_is_not_urgent_waits_for_claims_a_bounded_time(tmp_path: Path) -> None:
    """Bug: while claims kept arriving (some urgent writer always waiting), a write that is
    not urgent (an API create, a beat, a large acknowledgement) waited without bound. It now
    lets them go first for at most YIELD_TO_URGENT_S, then queues like anyone."""
    import fcntl

    from tocsin.stores.sqlite import YIELD_TO_URGENT_S

    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    order: list[str] = []
    with open(f"{tmp_path / 't.db'}.claim-lock", "ab") as intent:
        fcntl.flock(intent.fileno(), fcntl.LOCK_SH)  # an urgent writer waits, and waits on
        writer = threading.Thread(target=_write, args=(store, "beat", order),
                                  kwargs={"urgent": False})
        writer.start()
        writer.join(YIELD_TO_URGENT_S + 10)
        done = not writer.is_alive()
        fcntl.flock(intent.fileno(), fcntl.LOCK_UN)
    writer.join(10)
    assert done and order == ["beat"], "the write waited without bound behind claims"


def test_an_acknowledgements_statements_do_not_grow_with_its_rows(tmp_path: Path) -> None:
    """Bug: the attempt log and the counters went in by executemany, one step per row, and
    sqlite3 takes the GIL back between steps: beside the engine's busy threads, an
    acknowledgement of 1 000 deliveries held the writer lock for seconds, and every other
    writer of every process waited. Each now goes in as one statement, whatever the rows;
    every row and count is still written."""
    from tocsin.domain import Ack, NewSchedule, Outcome, Status
    from tocsin.stores.sql.metrics import DELIVERIES

    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    steps: dict[int, int] = {}
    for n in (10, 500):
        ids = [s.id for s, _ in store.create(
            [NewSchedule(channel="c", payload=b"{}", due_ms=1_000) for _ in range(n)],
            now_ms=1_000)]
        rows = store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=3, until_ms=2_000,
                           now_ms=2_000, lease_ms=60_000, limit=n)
        acks = [Ack(schedule_id=r.id, delivery_id=f"{r.id}-1", attempt=1,
                    outcome=Outcome.DELIVERED, error="é\"'" if i % 2 else None,
                    started_ms=2_000, ended_ms=2_010, due_ms=1_000, status=Status.DELIVERED)
                for i, r in enumerate(rows)]
        counting = store._local.conn = StatementLog(store._conn)  # this thread's connection
        try:
            assert store.acknowledge(epoch=rows[0].epoch, acks=acks, now_ms=2_010) == n
        finally:
            store._local.conn = counting.conn
        steps[n] = counting.steps
        assert {store.get(i).status for i in ids} == {Status.DELIVERED}
        logged = store._rows("SELECT count(*), sum(lateness_ms), count(error) FROM deliveries "
                             "WHERE schedule_id IN (SELECT value FROM json_each(?))",
                             (json.dumps(ids),))
        assert logged == [(n, n * 1_010, n // 2)]
    assert steps[500] == steps[10], steps
    delivered = sum(v for (name, _), v in store.counter_totals().items() if name == DELIVERIES)
    assert delivered == 510

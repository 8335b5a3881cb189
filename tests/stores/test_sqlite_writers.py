"""SQLite's one writer at a time: a claim (an urgent write) goes before the other writers
waiting for the lock, of its own process or of others (whichever the kernel wakes first, a
writer that is not urgent lets the lock go again while a claim waits)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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

"""SQLite's one writer at a time: a claim (an urgent write) goes before the other writers
waiting for the lock, in this process and in others."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

from tocsin.stores.sqlite import SQLiteStore

SETTLE_S = 0.3
"""Time for the waiting writers to reach their wait (the order they reach it in is the one
being tested, so each is started only after the last has settled)."""


def _write(store: SQLiteStore, name: str, order: list[str], *, urgent: bool) -> None:
    def work(conn: object) -> None:
        order.append(name)

    store._work(work, urgent=urgent)


def test_a_claim_goes_before_writers_that_waited_longer(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    order: list[str] = []
    release = threading.Event()
    holding = threading.Event()

    def hold(conn: object) -> None:
        holding.set()
        release.wait(10)

    holder = threading.Thread(target=store._work, args=(hold,))
    holder.start()
    holding.wait(10)
    waiters = []
    for name, urgent in (("ack-1", False), ("ack-2", False), ("claim", True)):
        waiters.append(threading.Thread(target=_write, args=(store, name, order),
                                        kwargs={"urgent": urgent}))
        waiters[-1].start()
        time.sleep(SETTLE_S)
    release.set()
    for t in (holder, *waiters):
        t.join(10)
    assert order[0] == "claim" and sorted(order[1:]) == ["ack-1", "ack-2"]
    store.close()


def _hold_then_write(path: str, started: object, release: object) -> None:
    store = SQLiteStore(path, buckets=4)

    def hold(conn: object) -> None:
        started.set()  # type: ignore[attr-defined]
        release.wait(10)  # type: ignore[attr-defined]

    store._work(hold)
    store.close()


def _log_write(path: str, name: str, urgent: bool) -> None:
    store = SQLiteStore(path, buckets=4)

    def work(conn: object) -> None:
        conn.execute("INSERT INTO meta VALUES (?, ?)", (f"w-{name}", str(time.time_ns())))  # type: ignore[attr-defined]

    store._work(work, urgent=urgent)
    store.close()


def test_a_claim_of_another_process_goes_first_too(tmp_path: Path) -> None:
    path = str(tmp_path / "t.db")
    SQLiteStore(path, buckets=4).close()
    ctx = multiprocessing.get_context("spawn")
    started, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold_then_write, args=(path, started, release))
    holder.start()
    assert started.wait(30)
    procs = []
    for name, urgent in (("ack", False), ("claim", True)):
        procs.append(ctx.Process(target=_log_write, args=(path, name, urgent)))
        procs[-1].start()
        time.sleep(SETTLE_S * 5)  # a spawned interpreter takes a moment to reach the lock
    release.set()
    for p in (holder, *procs):
        p.join(30)
    store = SQLiteStore(path, buckets=4)
    rows = store._work(lambda conn: conn.execute(
        "SELECT k FROM meta WHERE k LIKE 'w-%' ORDER BY CAST(v AS INTEGER)").fetchall(),
        write=False)
    assert [r[0] for r in rows] == ["w-claim", "w-ack"]
    store.close()

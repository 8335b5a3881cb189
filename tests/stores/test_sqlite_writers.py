"""SQLite's one writer at a time: a claim (an urgent write) goes before the other writers of
its process waiting for the lock. Across processes the order depends on the kernel's wake-ups
(a claim is let through before the writers that come to the lock while it waits); a test of it
passed with the priority off too, so what it buys there is measured by ``bench/run
isolation``, not asserted here."""

from __future__ import annotations

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

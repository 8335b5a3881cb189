"""The one piece of process state a Spark Python worker keeps: :class:`Worker`.

Spark builds data sources and sinks from string options, in the driver and in each Python
worker (re-used across micro-batches), so they cannot be handed live objects. They ask
:func:`worker` instead: one clock and one open store per store URL in this process, kept for
the next batch (the dispatcher keeps its cores beside them: :mod:`tocsin.dispatcher.runtime`).
Making the worker also tunes the GC (:func:`tune_gc`), as the driver does for its relay.
"""

from __future__ import annotations

import gc
import threading

from tocsin.abc import Store
from tocsin.clock import Clock, SystemClock
from tocsin.stores import open_store

__all__ = ["GC_THRESHOLDS", "Worker", "store_for", "tune_gc", "worker"]

GC_THRESHOLDS = (50_000, 50, 1_000)
"""The cyclic collector's thresholds in dispatcher processes. A claim or a delivery makes tens
of thousands of short-lived tuples, none of them cyclic; at Python's default (a young
collection every 700 allocations) the collector took 10-20 % of a batch's Python time."""


def tune_gc() -> None:
    """Set :data:`GC_THRESHOLDS` in this process: every process that claims and delivers
    (Spark's workers, the driver that runs the relay). The claim → deliver → acknowledge
    loop of one process over a 60 000-row drain: 61-65 us of CPU a row at Python's default,
    56-57 with these."""
    gc.set_threshold(*GC_THRESHOLDS)


class Worker:
    """This process's open stores, by store URL and bucket count, with one clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._stores: dict[tuple[str, int], Store] = {}

    def open(self, url: str, buckets: int) -> Store:
        """The store at ``url`` (opened once per process)."""
        with self._lock:
            store = self._stores.get((url, buckets))
            if store is None:
                store = self._stores[(url, buckets)] = open_store(url, buckets=buckets)
            return store


_WORKER: list[Worker] = []
_WORKER_LOCK = threading.Lock()


def worker() -> Worker:
    """This process's :class:`Worker` on the system clock, made (and the GC tuned) on first
    use by a Spark stage."""
    with _WORKER_LOCK:
        if not _WORKER:
            tune_gc()
            _WORKER.append(Worker(SystemClock()))
        return _WORKER[0]


def store_for(url: str, buckets: int) -> Store:
    """This process's store at ``url``, through its :class:`Worker` (for the pipeline jobs,
    whose executors open the store the same way the dispatcher's do)."""
    return worker().open(url, buckets)

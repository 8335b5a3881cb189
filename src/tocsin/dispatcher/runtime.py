"""The dispatcher's state in a Spark worker process: its cores, kept between micro-batches
over the stores and the clock of the process's :class:`~tocsin.spark.worker.Worker`."""

from __future__ import annotations

import threading

from tocsin.abc import Store
from tocsin.dispatcher.core import DispatchCore
from tocsin.dispatcher.expansion import ExpansionCore
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.workers import ThreadedWorkers
from tocsin.spark.worker import Worker
from tocsin.spark.worker import worker as process_worker

__all__ = ["DispatchWorker", "worker"]


class DispatchWorker:
    """This process's dispatcher cores, by store URL and bucket count, over ``process``'s
    stores and clock."""

    def __init__(self, process: Worker) -> None:
        self.process = process
        self._lock = threading.Lock()
        self._dispatch: dict[tuple[str, int, int], DispatchCore] = {}
        self._expansion: dict[tuple[str, int], ExpansionCore] = {}

    def store(self, options: DispatchOptions) -> Store:
        """The store ``options`` name (opened once)."""
        return self.process.open(options.store_url, options.buckets)

    def dispatch(self, options: DispatchOptions) -> DispatchCore:
        """The delivery core over that store (its live channels kept between batches); the
        relay query has a core of its own."""
        key = (options.store_url, options.buckets, options.relay)
        store = self.store(options)
        with self._lock:
            old = self._dispatch.get(key)
            if old is None or old.options != options:
                if old is not None:
                    old.engine.close()  # hands back, finishes, joins; the channels stay
                self._dispatch[key] = DispatchCore(
                    store, options=options, clock=self.process.clock,
                    channels=old.channels if old else None,
                    workers=ThreadedWorkers(send_threads=options.send_threads))
            return self._dispatch[key]

    def expansion(self, options: DispatchOptions) -> ExpansionCore:
        """The recurring expansion core over that store."""
        key, store = (options.store_url, options.buckets), self.store(options)
        with self._lock:
            old = self._expansion.get(key)
            if old is None or old.options != options:
                self._expansion[key] = ExpansionCore(store, options=options,
                                                     clock=self.process.clock)
            return self._expansion[key]


_WORKER: list[DispatchWorker] = []
_WORKER_LOCK = threading.Lock()


def worker() -> DispatchWorker:
    """This process's :class:`DispatchWorker`, over :func:`tocsin.spark.worker.worker`."""
    with _WORKER_LOCK:
        if not _WORKER:
            _WORKER.append(DispatchWorker(process_worker()))
        return _WORKER[0]

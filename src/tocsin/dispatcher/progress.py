"""The dispatcher's own log lines about its queries: a summary of the batches at most every
:data:`SUMMARY_EVERY_S` (only when something was done), and a query's failure with its cause.
Runs on the driver as a Spark streaming-query listener."""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

from pyspark.sql.streaming.listener import StreamingQueryListener

__all__ = ["SUMMARY_EVERY_S", "ProgressLog"]

SUMMARY_EVERY_S = 30.0
log = logging.getLogger("tocsin.dispatcher")


class ProgressLog(StreamingQueryListener):
    """Sums each query's batches and logs them at a sane rate, and each query's first batch
    with its steps; calls ``on_first_batch(name)`` after a query's first batch and
    ``on_terminated`` when a query stops."""

    def __init__(self, on_terminated: Callable[[], None] | None = None,
                 on_first_batch: Callable[[str], None] | None = None) -> None:
        self._on_terminated = on_terminated
        self._on_first_batch = on_first_batch
        self._seen: set[str] = set()
        self._rows: dict[str, int] = defaultdict(int)
        self._batches: dict[str, int] = defaultdict(int)
        self._slowest: dict[str, int] = defaultdict(int)
        self._since = time.monotonic()

    def onQueryStarted(self, event: Any) -> None:
        log.info("query started", extra={"query": event.name})

    def onQueryProgress(self, event: Any) -> None:
        p = event.progress
        if p.name not in self._seen:  # where a start's seconds go: the first batch's steps
            self._seen.add(p.name)
            log.info("first batch", extra={"query": p.name, "ms": int(p.batchDuration),
                                           "steps_ms": dict(p.durationMs)})
            if self._on_first_batch is not None:
                self._on_first_batch(p.name)
        self._rows[p.name] += int(p.numInputRows)
        self._batches[p.name] += 1
        self._slowest[p.name] = max(self._slowest[p.name], int(p.batchDuration))
        if time.monotonic() - self._since >= SUMMARY_EVERY_S:
            self._flush()

    def onQueryIdle(self, event: Any) -> None:
        if time.monotonic() - self._since >= SUMMARY_EVERY_S:
            self._flush()

    def onQueryTerminated(self, event: Any) -> None:
        self._flush()
        if event.exception:
            log.error("query failed", extra={"query_id": str(event.id),
                                             "error": str(event.exception).splitlines()[0]})
        else:
            log.info("query stopped", extra={"query_id": str(event.id)})
        if self._on_terminated is not None:
            self._on_terminated()

    def _flush(self) -> None:
        for name, rows in sorted(self._rows.items()):
            if rows:
                log.info("batches", extra={"query": name, "batches": self._batches[name],
                                           "rows": rows, "slowest_ms": self._slowest[name],
                                           "over_s": round(time.monotonic() - self._since)})
        self._rows.clear()
        self._batches.clear()
        self._slowest.clear()
        self._since = time.monotonic()

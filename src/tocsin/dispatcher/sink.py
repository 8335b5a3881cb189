"""The dispatcher's sink: a stream writer that delivers on the executors.

``write`` runs in each Spark task with the record batches its bucket range claimed; it hands
them to their channels and acknowledges them under their epoch, then returns a tally.
``commit`` runs on the driver once every task of the batch succeeded, and records the batch's
figures as the dispatcher's heartbeat (read by ``/readyz`` and ``/metrics``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from tocsin.abc import ClaimedRow
from tocsin.clock import SystemClock
from tocsin.dispatcher.beat import DISPATCHER, batch_counts, beat_info
from tocsin.dispatcher.deliver import Tally, deliver
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runtime import channels_for, log, store_for
from tocsin.errors import StoreError

__all__ = ["DeliveryStreamWriter"]


@dataclass
class TaskTally(WriterCommitMessage):
    """One task's tally, sent to the driver."""

    tally: Tally
    started_ms: int
    ended_ms: int


class DeliveryStreamWriter(DataSourceStreamArrowWriter):
    """Delivers each claimed row and acknowledges it."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskTally:
        opts = self.options
        store = store_for(opts.store_url, opts.buckets)
        channels = channels_for(store)
        clock = SystemClock()
        started = clock.now_ms()
        tally = Tally()
        for batch in iterator:
            rows = [ClaimedRow(*r) for r in zip(*(c.to_pylist() for c in batch.columns),
                                               strict=True)]
            tally.add(deliver(rows, store=store, channels=channels, retry=opts.retry,
                              clock=clock))
        return TaskTally(tally=tally, started_ms=started, ended_ms=clock.now_ms())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        opts = self.options
        total = Tally()
        started = ended = time.time_ns() // 1_000_000
        for message in messages:
            if isinstance(message, TaskTally):
                total.add(message.tally)
                started = min(started, message.started_ms)
        store = store_for(opts.store_url, opts.buckets)
        try:
            store.beat(DISPATCHER, now_ms=ended,
                       info=beat_info(batch_id=batchId, batch_ms=ended - started, tally=total))
            store.add_counts(batch_counts(ended - started))
        except StoreError as exc:  # the batch is done; only its figures are lost
            log.warning("dispatcher: could not record batch %d: %s", batchId, exc)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

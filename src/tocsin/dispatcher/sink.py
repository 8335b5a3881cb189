"""The dispatcher's sink: a stream writer that delivers on the executors.

``write`` runs in each Spark task with the record batches its bucket range claimed; it hands
them to :meth:`~tocsin.dispatcher.core.DispatchCore.deliver` (the process's delivery engine
sends them and acknowledges each verdict under its epoch, on its own threads:
:mod:`tocsin.dispatcher.engine`), holds its bucket range for a hand-over window
(:mod:`tocsin.dispatcher.handover`), then returns the tally of what the engine finished
meanwhile; what is still in flight stays CLAIMED and is acknowledged when it completes.
``commit`` runs on the driver once every task of the batch succeeded, and records the batch's
figures as the dispatcher's heartbeat (read by ``/readyz`` and ``/metrics``).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage

from tocsin.dispatcher.core import DispatchCore
from tocsin.dispatcher.deliver import Tally
from tocsin.dispatcher.handover import hold, key_runs, window_end
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runtime import worker
from tocsin.dispatcher.source import from_arrow
from tocsin.errors import StoreError

__all__ = ["DeliveryStreamWriter"]


@dataclass
class TaskTally(WriterCommitMessage):
    """One task's tally, sent to the driver."""

    tally: Tally
    started_ms: int
    ended_ms: int


_READY_RUNS: set[str] = set()


def _warming(core: DispatchCore) -> bool:
    """Whether this task is in its run's first (warm-up) batch, which holds no window: it
    starts the workers and opens the channels, and ``/readyz`` waits for it (a window would
    make every start up to a window longer)."""
    run = core.options.run
    if not run or run in _READY_RUNS:
        return False
    try:
        ready = any(r.run == run and r.ready_ms is not None for r in core.store.runs())
    except StoreError:
        return False
    if ready:
        _READY_RUNS.add(run)
    return not ready


class DeliveryStreamWriter(DataSourceStreamArrowWriter):
    """Delivers each claimed row and acknowledges it."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskTally:
        from pyspark import TaskContext

        core = worker().dispatch(self.options)
        started = core.clock.now_ms()
        core.warm()  # once per worker process: its first batch opens the channels
        tally, rows = Tally(), []
        for batch in iterator:
            rows += from_arrow(batch)
        tally.add(core.deliver(rows))
        context, window = TaskContext.get(), self.options.hand_over_ms
        if context is not None and window > 0 and not _warming(core):
            shift = self.options.grid_ms + (window // 2 if self.options.relay else 0)
            span = core.window_span(context.partitionId())
            if span is not None:  # on one writer, the batch's other tasks hold no window
                tally.add(hold(core, context.partitionId(), relay=bool(self.options.relay),
                               span=span,
                               end_ms=window_end(core.clock.now_ms(), window, shift_ms=shift))[0])
        elif context is not None:  # no window: a key's due run still goes out here
            tally.add(key_runs(core, context.partitionId(), rows, started_ms=started)[0])
        tally.add(core.collect())
        return TaskTally(tally=tally, started_ms=started, ended_ms=core.clock.now_ms())

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        if self.options.relay:  # the main query's batches are the dispatcher's beat
            return
        core = worker().dispatch(self.options)
        total = Tally()
        started = core.clock.now_ms()
        for message in messages:
            if isinstance(message, TaskTally):
                total.add(message.tally)
                started = min(started, message.started_ms)
        core.record_batch(batchId, total, started_ms=started)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass

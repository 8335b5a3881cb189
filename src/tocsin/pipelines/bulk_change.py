"""``tocsin bulk cancel|reschedule``: a bulk change by predicate as a Spark batch job, for
millions of schedules.

The store's buckets are cut into ranges, one Spark partition each; on the executors every
partition runs the store's own :meth:`~tocsin.abc.BulkChangeStore.cancel_where` (or
``reschedule_where``) over its bucket range, without a limit, in chunks of one small
transaction, each row by the compare-and-set of a single cancel. The partitions' counts are
summed on the driver. A retried task runs its range again: what it changed is no longer
PENDING (a cancel), or is set to the same time again (a reschedule to a fixed time). A
reschedule by a shift is not repeatable: a task retried after it changed some chunks shifts
those again, so for millions prefer a fixed time (or a due range that the shift leaves).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.domain import BulkResult, Selection
from tocsin.errors import ValidationError
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["BulkChange", "BulkOp", "bucket_ranges", "run_bulk_change"]


class BulkOp(StrEnum):
    """What the job does to each selected waiting schedule."""

    CANCEL = "cancel"
    """Cancel it (never delivered)."""
    RESCHEDULE = "reschedule"
    """Move it to ``due_ms``, or by ``shift_ms``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkChange:
    """One bulk change, picklable for the executors."""

    op: BulkOp
    selection: Selection
    store_url: str
    buckets: int
    now_ms: int
    due_ms: int | None = None
    shift_ms: int | None = None
    chunk: int = 1_000

    def apply(self, lo: int, hi: int) -> BulkResult:
        """The change over buckets ``lo..hi`` (on an executor)."""
        from tocsin.spark.worker import store_for

        store = store_for(self.store_url, self.buckets)
        part = self.selection.within(lo, hi)
        if self.op is BulkOp.CANCEL:
            return store.cancel_where(part, now_ms=self.now_ms, limit=None, chunk=self.chunk)
        return store.reschedule_where(part, now_ms=self.now_ms, due_ms=self.due_ms,
                                      shift_ms=self.shift_ms, limit=None, chunk=self.chunk)


def bucket_ranges(buckets: int, parts: int) -> list[tuple[int, int]]:
    """``0..buckets-1`` cut into at most ``parts`` contiguous inclusive ranges."""
    parts = max(1, min(parts, buckets))
    edges = [buckets * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(parts)]


def run_bulk_change(spark: SparkSession, op: BulkOp, selection: Selection, *,
                    settings: Settings, due_ms: int | None = None, shift_ms: int | None = None,
                    partitions: int | None = None, clock: Clock | None = None) -> dict[str, Any]:
    """Apply ``op`` to every waiting schedule of ``selection`` in ``settings.store_url``; the
    summed counts (matched, changed, too_late) and the partitions used."""
    if op is BulkOp.RESCHEDULE and (due_ms is None) == (shift_ms is None):
        raise ValidationError("due_at", "give exactly one of due_at or shift")
    store = open_store(settings.store_url, buckets=settings.buckets)
    buckets = store.buckets
    store.close()
    job = BulkChange(op=op, selection=selection, store_url=settings.store_url, buckets=buckets,
                     now_ms=(clock or SystemClock()).now_ms(), due_ms=due_ms,
                     shift_ms=shift_ms)
    sc = spark.sparkContext
    ranges = bucket_ranges(buckets, partitions or sc.defaultParallelism * 2)
    results = (sc.parallelize(ranges, len(ranges))
               .map(lambda r: job.apply(r[0], r[1])).collect())
    total = sum(results, BulkResult(matched=0, changed=0, too_late=0, more=False))
    summary = asdict(total)
    summary.pop("more")
    return {"op": op.value, **summary, "partitions": len(ranges)}

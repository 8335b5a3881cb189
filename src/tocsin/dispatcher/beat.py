"""The dispatcher's heartbeat: what it writes with ``store.beat("dispatcher", info=...)``
after each batch, read back by ``/readyz`` and ``/metrics``; and the batch-duration counters
each batch adds to (:func:`batch_counts`).

Schema (version 2; a beat holds only its own batch — running totals are the store's
counters, which add up across dispatchers where a read-then-write of the beat did not)::

    {"v": 2, "batch_id": int, "batch_ms": int,
     "batch": {"delivered", "retried", "dead", "fenced", "lateness_sum_ms", "lateness_buckets"},
     "lateness_bounds_ms": [...]}                         # upper bounds of the buckets

Kept free of heavy imports: Spark runs the sink's ``commit`` in a fresh Python process.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import asdict
from typing import Any

from tocsin.dispatcher.deliver import LATENESS_BOUNDS_MS, Tally

__all__ = ["BATCH_BOUNDS_MS", "BATCH_DURATION", "BEAT_VERSION", "DISPATCHER", "SOURCE",
           "batch_counts", "beat_info"]

BEAT_VERSION = 2
DISPATCHER = "dispatcher"
"""Component name of the sink's per-batch beat."""
SOURCE = "dispatcher-source"
"""Component name of the source's idle beat (every few seconds, even when nothing is due)."""
BATCH_DURATION = "batch_ms"
"""The counter of micro-batches by duration bucket (``le`` index), and their summed duration."""
BATCH_BOUNDS_MS = (100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000)
"""Upper bounds of the batch-duration histogram's buckets (the last bucket is unbounded)."""


def beat_info(*, batch_id: int, batch_ms: int, tally: Tally) -> dict[str, Any]:
    """The beat after a batch: its own figures."""
    return {"v": BEAT_VERSION, "batch_id": batch_id, "batch_ms": batch_ms,
            "batch": asdict(tally), "lateness_bounds_ms": list(LATENESS_BOUNDS_MS)}


def batch_counts(batch_ms: int) -> dict[tuple[str, str], int]:
    """What one micro-batch of ``batch_ms`` adds to the batch-duration counters."""
    le = bisect_left(BATCH_BOUNDS_MS, batch_ms)
    return {(BATCH_DURATION, f'{{"le":{le}}}'): 1, (BATCH_DURATION, "{}"): batch_ms}

"""The heartbeats the dispatcher's queries write with ``store.beat(component, info=...)``
after each batch, read back by ``/readyz``, ``/metrics`` and ``tocsin status``; both schemas
are here, each versioned; and the batch-duration counters each batch adds to
(:func:`batch_counts`).

``dispatcher`` (:func:`beat_info`), version 2: a beat holds only its own batch — running totals
are the store's counters, which add up across dispatchers where a read-then-write of the beat
did not::

    {"v": 2, "batch_id": int, "batch_ms": int,
     "batch": {"delivered", "retried", "dead", "fenced", "lateness_sum_ms", "lateness_buckets"},
     "lateness_bounds_ms": [...]}                         # upper bounds of the buckets

``expander`` (:class:`ExpanderBeat`), version 1: the batch's counts and running totals, kept
in the beat itself (one expander per store writes it)::

    {"v": 1, "batch_id": int,
     "batch":  {"recurring": int, "firings": int, "messages": int, "skipped": int},
     "totals": {the same keys, summed over every batch since the store was created}}

The unversioned expander form written before (``totals`` a list in that key order) is read too.

Kept free of heavy imports: Spark runs the sink's ``commit`` in a fresh Python process.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from tocsin.dispatcher.deliver import LATENESS_BOUNDS_MS, Tally

__all__ = ["BATCH_BOUNDS_MS", "BATCH_DURATION", "BEAT_VERSION", "DISPATCHER",
           "EXPANDER_BEAT_KEYS", "EXPANDER_BEAT_VERSION", "SOURCE", "ExpanderBeat",
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


EXPANDER_BEAT_VERSION = 1
EXPANDER_BEAT_KEYS = ("recurring", "firings", "messages", "skipped")
"""What an expansion batch counts: recurring schedules moved on, firings, messages, skipped."""


def _counts(values: Any) -> dict[str, int]:
    if isinstance(values, Mapping):
        return {k: int(values.get(k, 0)) for k in EXPANDER_BEAT_KEYS}
    if isinstance(values, list | tuple) and len(values) == len(EXPANDER_BEAT_KEYS):
        return {k: int(v) for k, v in zip(EXPANDER_BEAT_KEYS, values, strict=True)}
    return dict.fromkeys(EXPANDER_BEAT_KEYS, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpanderBeat:
    """One expander heartbeat: the last batch's counts and the running totals."""

    batch_id: int
    batch: Mapping[str, int] = field(default_factory=lambda: _counts(None))
    totals: Mapping[str, int] = field(default_factory=lambda: _counts(None))

    def after(self, batch_id: int, batch: Mapping[str, int]) -> ExpanderBeat:
        """The beat of the next batch: its counts, added to these totals."""
        counts = _counts(batch)
        return ExpanderBeat(batch_id=batch_id, batch=counts,
                            totals={k: self.totals[k] + counts[k] for k in EXPANDER_BEAT_KEYS})

    def to_info(self) -> dict[str, Any]:
        """As stored (version :data:`EXPANDER_BEAT_VERSION`)."""
        return {"v": EXPANDER_BEAT_VERSION, "batch_id": self.batch_id,
                "batch": dict(self.batch), "totals": dict(self.totals)}

    @classmethod
    def from_info(cls, info: Mapping[str, Any] | None) -> ExpanderBeat:
        """A stored beat (this version or the unversioned one); no beat yet: all zeros."""
        if not info:
            return cls(batch_id=-1)
        return cls(batch_id=int(info.get("batch_id", -1)), batch=_counts(info.get("batch")),
                   totals=_counts(info.get("totals")))

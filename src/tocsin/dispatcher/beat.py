"""The dispatcher's heartbeat: what it writes with ``store.beat("dispatcher", info=...)``
after each batch, read back by ``/readyz`` and ``/metrics``.

Schema (version 1)::

    {"v": 1, "batch_id": int, "batch_ms": int,            # the last batch
     "batch": {"delivered", "retried", "dead", "fenced", "lateness_sum_ms", "lateness_buckets"},
     "totals": {same keys, summed over every batch since the store was created},
     "lateness_bounds_ms": [...]}                         # upper bounds of the buckets

Kept free of heavy imports: Spark runs the sink's ``commit`` in a fresh Python process.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from tocsin.dispatcher.deliver import LATENESS_BOUNDS_MS, Tally

__all__ = ["BEAT_VERSION", "DISPATCHER", "SOURCE", "beat_info"]

BEAT_VERSION = 1
DISPATCHER = "dispatcher"
"""Component name of the sink's per-batch beat."""
SOURCE = "dispatcher-source"
"""Component name of the source's idle beat (every few seconds, even when nothing is due)."""


def beat_info(*, batch_id: int, batch_ms: int, tally: Tally,
              previous: dict[str, Any] | None) -> dict[str, Any]:
    """The beat after a batch: its own figures and the running totals."""
    batch = asdict(tally)
    totals = dict(batch)
    before = (previous or {}).get("totals")
    if before and (previous or {}).get("v") == BEAT_VERSION:
        for key, value in before.items():
            if key == "lateness_buckets":
                totals[key] = [a + b for a, b in zip(value, batch[key], strict=True)]
            elif key in totals:
                totals[key] = totals[key] + value
    return {"v": BEAT_VERSION, "batch_id": batch_id, "batch_ms": batch_ms, "batch": batch,
            "totals": totals, "lateness_bounds_ms": list(LATENESS_BOUNDS_MS)}

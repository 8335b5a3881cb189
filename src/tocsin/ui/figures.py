"""The overview's figures, from the store's counters and pending schedules."""

from __future__ import annotations

import json
from typing import Any

from tocsin.abc import Store
from tocsin.domain.delivery import LATENESS_BOUNDS_MS
from tocsin.stores.sql.metrics import DELIVERIES, LATENESS

__all__ = ["deliveries_by_outcome", "lateness_percentiles", "pending_next_24h"]

HOUR_MS = 3_600_000


def _mine(raw: str, tenant: str | None) -> dict[str, Any] | None:
    labels: dict[str, Any] = json.loads(raw)
    return labels if tenant is None or labels.get("tenant") == tenant else None


def pending_next_24h(store: Store, now_ms: int, tenant: str | None) -> list[dict[str, Any]]:
    """PENDING schedules due in each of the next 24 hours, with a bar width (percent)."""
    slots = dict(store.pending_by_slot(from_ms=now_ms, to_ms=now_ms + 24 * HOUR_MS,
                                       slot_ms=HOUR_MS, tenant=tenant))
    counts = [slots.get(now_ms + h * HOUR_MS, 0) for h in range(24)]
    top = max(counts) or 1
    return [{"hour": h, "count": n, "width": round(100 * n / top)} for h, n in enumerate(counts)]


def deliveries_by_outcome(totals: dict[tuple[str, str], int],
                          tenant: str | None) -> dict[str, int]:
    """Delivery attempts so far by outcome (of ``tenant``)."""
    out = {"delivered": 0, "retried": 0, "dead": 0}
    for (name, raw), value in totals.items():
        labels = _mine(raw, tenant) if name == DELIVERIES else None
        if labels is not None:
            out[str(labels["outcome"])] = out.get(str(labels["outcome"]), 0) + value
    return out


def lateness_percentiles(totals: dict[tuple[str, str], int],
                         tenant: str | None) -> dict[str, str]:
    """p50, p90 and p99 lateness, as the upper bound of the histogram bucket they fall in."""
    buckets = [0] * (len(LATENESS_BOUNDS_MS) + 1)
    for (name, raw), value in totals.items():
        labels = _mine(raw, tenant) if name == LATENESS else None
        if labels is not None:
            buckets[int(labels["le"])] += value
    total = sum(buckets)
    out = {}
    for label, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
        if not total:
            out[label] = "-"
            continue
        seen, i = 0, 0
        while seen + buckets[i] < q * total:
            seen += buckets[i]
            i += 1
        out[label] = (f"≤ {LATENESS_BOUNDS_MS[i] / 1000:g} s" if i < len(LATENESS_BOUNDS_MS)
                      else f"> {LATENESS_BOUNDS_MS[-1] / 1000:g} s")
    return out

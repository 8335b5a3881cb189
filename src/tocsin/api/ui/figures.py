"""The overview's figures, from the store's counters and pending schedules."""

from __future__ import annotations

import json
from typing import Any

from tocsin.abc import Store
from tocsin.clock import iso_ms
from tocsin.domain.delivery import LATENESS_BOUNDS_MS
from tocsin.stores.sql.metrics import DELIVERIES, LATENESS, lateness_index

__all__ = ["deliveries_by_outcome", "finished_last_hour", "lateness_by_channel",
           "lateness_percentiles", "pending_next_24h"]

HOUR_MS = 3_600_000
MINUTE_MS = 60_000


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


def finished_last_hour(store: Store, now_ms: int, tenant: str | None) -> dict[str, Any]:
    """Schedules delivered, cancelled, dead and expired in each of the last 60 minutes (the
    current one last), with bar heights (percent of the busiest minute), and the hour's sums."""
    start = (now_ms // MINUTE_MS - 59) * MINUTE_MS
    counts: dict[int, dict[str, int]] = {
        start + m * MINUTE_MS: {"delivered": 0, "cancelled": 0, "dead": 0, "expired": 0}
        for m in range(60)}
    for slot, status, n in store.finished_by_slot(from_ms=start, to_ms=start + HOUR_MS,
                                                  slot_ms=MINUTE_MS, tenant=tenant):
        counts[slot][status.value.lower()] = n
    top = max((sum(c.values()) for c in counts.values()), default=0) or 1
    minutes = [{"at": iso_ms(slot, "seconds")[11:16], **c,
                **{f"{k}_h": round(100 * v / top) for k, v in c.items()}}
               for slot, c in sorted(counts.items())]
    sums = {k: sum(c[k] for c in counts.values())
            for k in ("delivered", "cancelled", "dead", "expired")}
    return {"minutes": minutes, "sums": sums}


def deliveries_by_outcome(totals: dict[tuple[str, str], int],
                          tenant: str | None) -> dict[str, int]:
    """Delivery attempts so far by outcome (of ``tenant``)."""
    out = {"delivered": 0, "retried": 0, "dead": 0, "expired": 0}
    for (name, raw), value in totals.items():
        labels = _mine(raw, tenant) if name == DELIVERIES else None
        if labels is not None:
            out[str(labels["outcome"])] = out.get(str(labels["outcome"]), 0) + value
    return out


def _span(ms: int) -> str:
    """A bucket bound as people read it: ``5 ms``, ``2.5 s``."""
    return f"{ms} ms" if ms < 1000 else f"{ms / 1000:g} s"


def lateness_by_channel(totals: dict[tuple[str, str], int],
                        tenant: str | None) -> dict[tuple[str, str], dict[str, str]]:
    """p50, p90 and p99 lateness of each destination (tenant, channel) of ``tenant``."""
    keys = {(str(lab.get("tenant")), str(lab.get("channel")))
            for (name, raw), _ in totals.items() if name == LATENESS
            and (lab := _mine(raw, tenant)) is not None}
    return {key: lateness_percentiles(totals, key[0], channel=key[1]) for key in sorted(keys)}


def lateness_percentiles(totals: dict[tuple[str, str], int],
                         tenant: str | None, *, channel: str | None = None) -> dict[str, str]:
    """p50, p90 and p99 lateness (of ``tenant``, of its ``channel``), as the upper bound of the
    histogram bucket they fall in."""
    buckets = [0] * (len(LATENESS_BOUNDS_MS) + 1)
    for (name, raw), value in totals.items():
        labels = _mine(raw, tenant) if name == LATENESS else None
        if labels is not None and (channel is None or labels.get("channel") == channel):
            buckets[lateness_index(labels["le"], LATENESS_BOUNDS_MS)] += value
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
        out[label] = (f"≤ {_span(LATENESS_BOUNDS_MS[i])}" if i < len(LATENESS_BOUNDS_MS)
                      else f"> {_span(LATENESS_BOUNDS_MS[-1])}")
    return out

"""Prometheus metrics, read from the store at scrape time (any API replica answers the same).

From the store: ``tocsin_schedules{status}`` (gauge) and ``tocsin_due_backlog`` (gauge).

From the dispatcher's heartbeat, the info it writes with ``store.beat("dispatcher", info=...)``
after every micro-batch, built by :func:`tocsin.dispatcher.beat.beat_info` (re-exported here;
the schema is documented there, version ``v`` = 1)::

    {"v": 1, "batch_id": int, "batch_ms": int,
     "batch":  {"delivered", "retried", "dead", "fenced", "lateness_sum_ms", "lateness_buckets"},
     "totals": {the same keys, summed over every batch},
     "lateness_bounds_ms": [upper bounds of lateness_buckets; one more bucket for +Inf]}

gives ``tocsin_dispatcher_last_batch_seconds`` and ``..._timestamp_seconds`` (gauges),
``tocsin_deliveries_total{outcome}`` (counter, from ``totals``) and
``tocsin_lateness_seconds`` (histogram, from ``totals``). A beat of another version, or a
malformed one, is skipped rather than failing the scrape.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from tocsin.abc import Store
from tocsin.clock import Clock
from tocsin.dispatcher.beat import BEAT_VERSION, DISPATCHER, beat_info

__all__ = ["OUTCOMES", "StoreCollector", "beat_info"]

OUTCOMES = ("delivered", "retried", "dead", "fenced")
"""The ``outcome`` labels of ``tocsin_deliveries_total``: keys of the beat's ``totals``."""


class StoreCollector(Collector):
    """Collects Tocsin's metrics from the store on each scrape."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        by_status = GaugeMetricFamily("tocsin_schedules", "Schedules by status.",
                                      labels=["status"])
        for status, count in self.store.counts().items():
            by_status.add_metric([status.value], count)
        yield by_status
        yield GaugeMetricFamily("tocsin_due_backlog", "PENDING schedules already due.",
                                value=self.store.due_backlog(now_ms=self.clock.now_ms()))
        beat = self.store.last_beat(DISPATCHER)
        if beat is not None and beat[1].get("v") == BEAT_VERSION:
            try:
                metrics = list(dispatcher_metrics(*beat))
            except (KeyError, TypeError, ValueError):
                metrics = []
            yield from metrics


def dispatcher_metrics(at_ms: int, info: dict[str, Any]) -> Iterator[Metric]:
    """The dispatcher's figures from one heartbeat (version :data:`BEAT_VERSION`)."""
    yield GaugeMetricFamily("tocsin_dispatcher_last_batch_seconds",
                            "Duration of the dispatcher's last micro-batch.",
                            value=info["batch_ms"] / 1000)
    yield GaugeMetricFamily("tocsin_dispatcher_last_batch_timestamp_seconds",
                            "When the dispatcher's last micro-batch ended.", value=at_ms / 1000)
    totals = info["totals"]
    outcomes = CounterMetricFamily("tocsin_deliveries", "Delivery attempts by outcome.",
                                   labels=["outcome"])
    for outcome in OUTCOMES:
        outcomes.add_metric([outcome], totals.get(outcome, 0))
    yield outcomes
    bounds, counts = info["lateness_bounds_ms"], totals["lateness_buckets"]
    cumulative, buckets = 0, []
    for bound, count in zip([*bounds, None], counts, strict=True):
        cumulative += count
        buckets.append(("+Inf" if bound is None else str(bound / 1000), cumulative))
    yield HistogramMetricFamily("tocsin_lateness_seconds",
                                "Delivered schedules' lateness past their due time.",
                                buckets=buckets, sum_value=totals["lateness_sum_ms"] / 1000)

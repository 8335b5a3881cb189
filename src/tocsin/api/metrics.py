"""Prometheus metrics, read from the store at scrape time (any API replica answers the same):
schedules by status, the due backlog, and the dispatcher's figures from its heartbeat."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)
from prometheus_client.registry import Collector

from tocsin.abc import Store
from tocsin.clock import Clock
from tocsin.dispatcher.beat import BEAT_VERSION, DISPATCHER

__all__ = ["StoreCollector"]


class StoreCollector(Collector):
    """Collects Tocsin's metrics from the store on each scrape."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        by_status = GaugeMetricFamily("tocsin_schedules", "Schedules by status.",
                                      labels=["status"])
        for status, count in self.store.counts().items():
            by_status.add_metric([status.value], count)
        yield by_status
        yield GaugeMetricFamily("tocsin_due_backlog", "PENDING schedules already due.",
                                value=self.store.due_backlog(now_ms=self.clock.now_ms()))
        beat = self.store.last_beat(DISPATCHER)
        if beat is None or beat[1].get("v") != BEAT_VERSION:
            return
        at_ms, info = beat
        yield GaugeMetricFamily("tocsin_dispatcher_last_batch_seconds",
                                "Duration of the dispatcher's last micro-batch.",
                                value=info["batch_ms"] / 1000)
        yield GaugeMetricFamily("tocsin_dispatcher_last_batch_timestamp_seconds",
                                "When the dispatcher's last micro-batch ended.", value=at_ms / 1000)
        totals = info["totals"]
        outcomes = CounterMetricFamily("tocsin_deliveries", "Delivery attempts by outcome.",
                                       labels=["outcome"])
        for outcome in ("delivered", "retried", "dead", "fenced"):
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

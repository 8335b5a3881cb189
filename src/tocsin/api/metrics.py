"""Prometheus metrics, read from the store at scrape time (any API replica answers the same).

Counters are sums of rows the store adds to atomically (:mod:`tocsin.stores.sql.metrics`), so
they add up with any number of dispatchers and API replicas and never go back:

- ``tocsin_deliveries_total{tenant,channel,outcome}``: attempts (``delivered``, ``retried``,
  ``dead``, ``expired``), counted in the acknowledging transaction;
- ``tocsin_fenced_total``: acknowledgements refused by the epoch fence;
- ``tocsin_lateness_seconds{tenant,channel}``: histogram of delivered schedules' lateness;
- ``tocsin_batch_duration_seconds``: histogram of dispatcher micro-batches (every dispatcher).

Gauges: ``tocsin_schedules{status}``, ``tocsin_due_backlog`` (PENDING and already due),
``tocsin_due_soon{within}`` (PENDING, due in the next 5 minutes / hour),
``tocsin_tokens_in_flight{tenant,policy}``, ``tocsin_paused_channels``,
``tocsin_halted_keys``, ``tocsin_channel_held{tenant,channel,reason}`` (a destination whose
breaker is open, or whose lane is full), ``tocsin_in_flight{tenant,channel}`` (CLAIMED, not yet
acknowledged), and from the newest dispatcher heartbeat
``tocsin_dispatcher_last_batch_seconds`` and ``..._timestamp_seconds``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Sequence
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
from tocsin.dispatcher.beat import BATCH_BOUNDS_MS, BATCH_DURATION, BEAT_VERSION, DISPATCHER
from tocsin.domain.delivery import LATENESS_BOUNDS_MS
from tocsin.stores.sql.metrics import (
    DELIVERIES,
    FENCED,
    LATENESS,
    LATENESS_SUM,
    lateness_index,
)

__all__ = ["StoreCollector"]

_SOON = (("5m", 300_000), ("1h", 3_600_000))


class StoreCollector(Collector):
    """Collects Tocsin's metrics from the store on each scrape."""

    def __init__(self, store: Store, clock: Clock) -> None:
        self.store = store
        self.clock = clock

    def collect(self) -> Iterator[Metric]:
        store, now = self.store, self.clock.now_ms()
        yield from _counters(store.counter_totals())
        by_status = GaugeMetricFamily("tocsin_schedules", "Schedules by status.",
                                      labels=["status"])
        for status, count in store.counts().items():
            by_status.add_metric([status.value], count)
        yield by_status
        yield GaugeMetricFamily("tocsin_due_backlog", "PENDING schedules already due.",
                                value=store.due_backlog(now_ms=now))
        soon = GaugeMetricFamily("tocsin_due_soon", "PENDING schedules due within a window.",
                                 labels=["within"])
        for name, span in _SOON:
            soon.add_metric([name], store.due_between(from_ms=now, to_ms=now + span))
        yield soon
        tokens = GaugeMetricFamily("tocsin_tokens_in_flight", "Policy tokens held now.",
                                   labels=["tenant", "policy"])
        for (tenant, policy), n in sorted(store.tokens_held(now_ms=now).items()):
            tokens.add_metric([tenant, policy], n)
        yield tokens
        yield GaugeMetricFamily("tocsin_paused_channels", "Channels paused now.",
                                value=len(store.paused_channels()))
        yield GaugeMetricFamily("tocsin_halted_keys", "Ordering keys halted now.",
                                value=len(store.halted_keys()))
        held = GaugeMetricFamily("tocsin_channel_held", "Destinations the dispatcher passes "
                                 "over now: reason open (breaker) or busy (lane full).",
                                 labels=["tenant", "channel", "reason"])
        for tenant, name, reason in sorted({(h.tenant, h.name, h.reason)
                                            for h in store.channel_holds()}):
            held.add_metric([tenant, name, reason], 1)
        yield held
        flight = GaugeMetricFamily("tocsin_in_flight", "Schedules handed to a dispatcher and "
                                   "not yet acknowledged.", labels=["tenant", "channel"])
        for (tenant, channel), n in sorted(store.claimed_by_channel().items()):
            flight.add_metric([tenant, channel], n)
        yield flight
        beat = store.last_beat(DISPATCHER)
        if beat is not None and beat[1].get("v") == BEAT_VERSION:
            at_ms, info = beat
            yield GaugeMetricFamily("tocsin_dispatcher_last_batch_seconds",
                                    "Duration of a dispatcher's latest micro-batch.",
                                    value=float(info.get("batch_ms", 0)) / 1000)
            yield GaugeMetricFamily("tocsin_dispatcher_last_batch_timestamp_seconds",
                                    "When a dispatcher's latest micro-batch ended.",
                                    value=at_ms / 1000)


def _counters(totals: dict[tuple[str, str], int]) -> Iterator[Metric]:
    """The counter families from the store's counter rows."""
    deliveries = CounterMetricFamily("tocsin_deliveries", "Delivery attempts by outcome.",
                                     labels=["tenant", "channel", "outcome"])
    lateness: dict[tuple[str, str], list[int]] = defaultdict(
        lambda: [0] * (len(LATENESS_BOUNDS_MS) + 1))
    late_sum: dict[tuple[str, str], int] = defaultdict(int)
    batches = [0] * (len(BATCH_BOUNDS_MS) + 1)
    batch_sum = fenced = 0
    for (name, raw), value in sorted(totals.items()):
        lab: dict[str, Any] = json.loads(raw)
        where = (str(lab.get("tenant", "")), str(lab.get("channel", "")))
        if name == DELIVERIES:
            deliveries.add_metric([*where, str(lab.get("outcome"))], value)
        elif name == LATENESS:
            lateness[where][lateness_index(lab["le"], LATENESS_BOUNDS_MS)] += value
        elif name == LATENESS_SUM:
            late_sum[where] += value
        elif name == FENCED:
            fenced += value
        elif name == BATCH_DURATION:
            if "le" in lab:
                batches[int(lab["le"])] += value
            else:
                batch_sum += value
    yield deliveries
    yield CounterMetricFamily("tocsin_fenced", "Acknowledgements refused by the epoch fence.",
                              value=fenced)
    late = HistogramMetricFamily("tocsin_lateness_seconds", "Delivered schedules' lateness "
                                 "past their due time.", labels=["tenant", "channel"])
    for where in sorted(lateness):
        late.add_metric(list(where), _buckets(LATENESS_BOUNDS_MS, lateness[where]),
                        late_sum[where] / 1000)
    yield late
    yield HistogramMetricFamily("tocsin_batch_duration_seconds", "Dispatcher micro-batches "
                                "by duration.", buckets=_buckets(BATCH_BOUNDS_MS, batches),
                                sum_value=batch_sum / 1000)


def _buckets(bounds: Sequence[int], counts: Sequence[int]) -> list[tuple[str, float]]:
    """Cumulative Prometheus buckets from per-bucket counts (the last one is +Inf)."""
    out, total = [], 0
    for bound, count in zip([*bounds, None], counts, strict=True):
        total += count
        out.append(("+Inf" if bound is None else str(bound / 1000), float(total)))
    return out

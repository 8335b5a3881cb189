"""Metrics that add up: two dispatchers on one store, counters scraped from a real API."""

from __future__ import annotations

import time
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores import open_store
from tocsin.testing.api_server import ApiServer
from tocsin.testing.dispatch import running_dispatcher, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 20_000


def _delivered(url: str, headers: dict[str, str]) -> float:
    text = httpx.get(f"{url}/metrics", headers=headers, timeout=30).text
    return sum(s.value for family in text_string_to_metric_families(text)
               for s in family.samples
               if s.name == "tocsin_deliveries_total" and s.labels.get("outcome") == "delivered")


def test_two_dispatchers_counters_sum_to_what_was_delivered(spark, backend_url: str,  # type: ignore[no-untyped-def]
                                                            tmp_path: Path) -> None:
    store = open_store(backend_url, buckets=16)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                  config={"path": str(tmp_path / "out.jsonl")}))
    server = ApiServer(store).start()
    try:
        assert _delivered(server.url, server.headers) == 0
        now = time.time_ns() // 1_000_000
        store.create([NewSchedule(channel="out", payload=b"{}", due_ms=now + 3_000 + i % 4_000)
                      for i in range(N)], now_ms=now)
        with running_dispatcher(spark, backend_url, tmp_path / "ck-blue", buckets=16,
                                partitions=2, trigger_seconds=0.2) as _blue, \
                running_dispatcher(spark, backend_url, tmp_path / "ck-green", buckets=16,
                                   partitions=2, trigger_seconds=0.2):
            wait_until(lambda: store.counts()[Status.DELIVERED] == N, timeout_s=240,
                       interval_s=0.5, what="every schedule delivered")
        assert _delivered(server.url, server.headers) == N
    finally:
        server.stop()
        store.close()

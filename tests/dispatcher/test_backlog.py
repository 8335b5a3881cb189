"""Back-pressure after downtime, and two dispatchers on one store (a double deploy)."""

from __future__ import annotations

import itertools
import time
from collections import defaultdict
from pathlib import Path

import pytest

from tocsin.dispatcher.source import bucket_ranges
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores import open_store
from tocsin.testing.dispatch import read_lines, running_dispatcher, wait_until

pytestmark = pytest.mark.spark

BUCKETS, PARTS, CAP = 16, 4, 20_000


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.mark.slow
def test_a_backlog_drains_in_capped_batches_in_due_order(spark, backend_url: str,  # type: ignore[no-untyped-def]
                                                         tmp_path: Path) -> None:
    """100 000 schedules came due during 10 minutes of downtime, and 1 000 more are due now:
    the restarted dispatcher drains them in batches of at most the cap, in due order within
    each bucket range, so the new ones wait only for what was due before them."""
    store = open_store(backend_url, buckets=BUCKETS)
    out = tmp_path / "out.jsonl"
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    now = _now()
    backlog = [NewSchedule(channel="out", payload=b"{}", due_ms=now - 600_000 + i * 6)
               for i in range(100_000)]
    for i in range(0, len(backlog), 10_000):
        store.create(backlog[i:i + 10_000], now_ms=now)
    store.create([NewSchedule(channel="out", payload=b'{"fresh":true}', due_ms=_now())
                  for _ in range(1_000)], now_ms=_now())
    with running_dispatcher(spark, backend_url, tmp_path / "ck", buckets=BUCKETS,
                            partitions=PARTS, batch_cap=CAP):
        wait_until(lambda: store.counts()[Status.DELIVERED] == 101_000, timeout_s=300,
                   interval_s=1, what="the backlog to drain")
    lines = read_lines(out)
    assert len(lines) == len({line["schedule_id"] for line in lines}) == 101_000
    rows = store.list_schedules(status=Status.DELIVERED, limit=200_000)
    # one claim = one (range, epoch, claim time): a micro-batch's, or one of a window's
    claims: dict[int, dict[tuple[int, int], list[int]]] = defaultdict(lambda: defaultdict(list))
    ranges = bucket_ranges(BUCKETS, PARTS)
    for row in rows:
        part = next(i for i, (lo, hi) in enumerate(ranges) if lo <= row.bucket <= hi)
        claims[part][(row.claim_epoch or 0, row.claimed_ms or 0)].append(row.due_ms)
    sizes = [len(due) for by_claim in claims.values() for due in by_claim.values()]
    assert max(sizes) <= CAP // PARTS, f"a claim exceeded its share of the cap: {max(sizes)}"
    assert len(sizes) >= 101_000 // CAP
    for part, by_claim in claims.items():
        ordered = [by_claim[c] for c in sorted(by_claim)]
        for earlier, later in itertools.pairwise(ordered):
            assert max(earlier) <= min(later), f"range {part} drained out of due order"
    store.close()


@pytest.mark.slow
def test_two_dispatchers_on_one_store_claim_each_schedule_once(spark, backend_url: str,  # type: ignore[no-untyped-def]
                                                               tmp_path: Path, say) -> None:
    store = open_store(backend_url, buckets=BUCKETS)
    out = tmp_path / "out.jsonl"
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    now = _now()
    ids = {s.id for s, _ in store.create(
        [NewSchedule(channel="out", payload=b"{}", due_ms=now + 3_000 + i % 4_000)
         for i in range(20_000)], now_ms=now)}
    with running_dispatcher(spark, backend_url, tmp_path / "ck-blue", buckets=BUCKETS,
                            partitions=2, trigger_seconds=0.2) as blue, \
            running_dispatcher(spark, backend_url, tmp_path / "ck-green", buckets=BUCKETS,
                               partitions=2, trigger_seconds=0.2) as green:
        wait_until(lambda: store.counts()[Status.DELIVERED] == 20_000, timeout_s=180,
                   interval_s=0.5, what="every schedule delivered")
        assert blue.isActive and green.isActive
    lines = read_lines(out)
    assert sorted(line["schedule_id"] for line in lines) == sorted(ids), "a repeat or a loss"
    epochs = {s.claim_epoch for s in store.list_schedules(status=Status.DELIVERED, limit=30_000)}
    say(f"double deploy: 20 000 delivered once each, by {len(epochs)} claim epochs")
    store.close()

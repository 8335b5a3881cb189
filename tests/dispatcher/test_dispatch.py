"""The dispatcher end to end on a real Spark session, a real SQLite file and real channels."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tocsin.abc import Store
from tocsin.dispatcher.beat import DISPATCHER
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.errors import ConflictError
from tocsin.stores import open_store
from tocsin.testing.dispatch import read_lines, running_dispatcher, wait_for_polls, wait_until

pytestmark = pytest.mark.spark


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def env(backend_url: str, tmp_path: Path) -> Iterator[tuple[Store, str, Path]]:
    """A fresh store (each backend) with a file channel ``out``: (store, url, out path)."""
    store = open_store(backend_url, buckets=16)
    out = tmp_path / "out.jsonl"
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    yield store, backend_url, out
    store.close()


def _schedule(store: Store, n: int, *, due_ms: int, spread_ms: int = 0,
              channel: str = "out") -> list[str]:
    items = [NewSchedule(channel=channel, payload=b'{"n": %d}' % i,
                         due_ms=due_ms + (spread_ms * i // max(n, 1))) for i in range(n)]
    return [s.id for s, _ in store.create(items, now_ms=_now())]


def test_delivers_every_schedule_once_with_its_attempt_log(spark, env, tmp_path):
    store, url, out = env
    ids = _schedule(store, 500, due_ms=_now() + 1500, spread_ms=1000)
    with running_dispatcher(spark, url, tmp_path / "ck", buckets=16, partitions=4):
        wait_until(lambda: len(read_lines(out)) >= 500, timeout_s=90, what="500 deliveries")
        wait_until(lambda: store.counts()[Status.DELIVERED] == 500, timeout_s=30,
                   what="500 acknowledgements")
    lines = read_lines(out)
    assert sorted(line["schedule_id"] for line in lines) == sorted(ids)
    assert all(line["delivery_id"] == f"{line['schedule_id']}-1" for line in lines)
    assert {line["payload"]["n"] for line in lines} == set(range(500))
    one = store.get(ids[0])
    assert one.status is Status.DELIVERED and one.attempts == 1
    assert one.lateness_ms is not None and one.lateness_ms >= 0
    log = store.deliveries(ids[0])
    assert [(d.attempt, d.outcome.value) for d in log] == [(1, "delivered")]


def test_a_row_committed_after_its_window_was_scanned_still_fires(spark, env, tmp_path):
    """DESIGN.md §3: claim ``due <= until`` with no lower bound."""
    store, url, out = env
    _schedule(store, 1, due_ms=_now())
    with running_dispatcher(spark, url, tmp_path / "ck", buckets=16, idle_beat_ms=50):
        wait_until(lambda: len(read_lines(out)) == 1, timeout_s=90, what="first delivery")
        wait_for_polls(store)  # more scans go by with nothing due
        late = _schedule(store, 1, due_ms=_now() - 5_000)[0]  # due before the last scan
        wait_until(lambda: any(r["schedule_id"] == late for r in read_lines(out)),
                   timeout_s=30, what="the late-committed schedule")
    assert store.get(late).status is Status.DELIVERED


def test_nothing_due_runs_no_batch(spark, env, tmp_path):
    store, url, _ = env
    _schedule(store, 1, due_ms=_now())
    with running_dispatcher(spark, url, tmp_path / "ck", buckets=16,
                            idle_beat_ms=50) as query:
        wait_until(lambda: store.counts()[Status.DELIVERED] == 1, timeout_s=90, what="delivery")
        progress = wait_until(lambda: query.lastProgress, timeout_s=30, what="progress")
        batches_before = progress["batchId"]
        wait_for_polls(store, polls=3)  # three triggers asked, and found nothing due
        assert query.lastProgress["batchId"] == batches_before
        _schedule(store, 1, due_ms=_now())
        wait_until(lambda: store.counts()[Status.DELIVERED] == 2, timeout_s=30, what="delivery")
        wait_until(lambda: query.lastProgress["batchId"] > batches_before, timeout_s=30,
                   what="a new batch once something is due")


def test_unregistered_channel_is_dead_at_once(spark, env, tmp_path):
    store, url, _ = env
    store.put_channel(ChannelSpec(name="gone", kind=ChannelKind.FILE,
                                  config={"path": str(tmp_path / "gone.jsonl")}))
    sid = _schedule(store, 1, due_ms=_now(), channel="gone")[0]
    store.delete_channel("gone", tenant="default")
    with running_dispatcher(spark, url, tmp_path / "ck", buckets=16):
        wait_until(lambda: store.get(sid).status is Status.DEAD, timeout_s=90, what="DEAD")
    assert "not registered" in (store.get(sid).last_error or "")


def test_cancels_around_due_time_never_lose_a_race(spark, env, tmp_path):
    """1 000 cancels timed around their schedules' due times: a cancel that answered
    CANCELLED is never delivered, and every refused cancel is for a delivered schedule."""
    store, url, out = env
    cancelled: set[str] = set()
    refused: set[str] = set()
    rng = random.Random(7)

    def canceller() -> None:
        for sid in plan:
            target = due[sid] + rng.randint(-1_500, 1_500)
            delay = (target - _now()) / 1000
            if delay > 0:
                time.sleep(delay)
            try:
                store.cancel(sid, now_ms=_now())
                cancelled.add(sid)
            except ConflictError:
                refused.add(sid)

    with running_dispatcher(spark, url, tmp_path / "ck", buckets=16, partitions=4,
                            trigger_seconds=0.2):
        # The schedules fall due once the dispatcher runs (its first batch beat), so some
        # cancels come after their hand-over even on a loaded machine.
        wait_until(lambda: store.last_beat(DISPATCHER), timeout_s=120, what="a first batch")
        ids = _schedule(store, 1000, due_ms=_now() + 4_000, spread_ms=4_000)
        due = {sid: store.get(sid).due_ms for sid in ids}
        plan = sorted(ids, key=lambda sid: due[sid] + rng.randint(-1_500, 1_500))
        worker = threading.Thread(target=canceller)
        worker.start()
        worker.join(timeout=60)
        wait_until(lambda: store.counts()[Status.PENDING] + store.counts()[Status.CLAIMED] == 0,
                   timeout_s=60, what="every schedule settled")
    delivered = {line["schedule_id"] for line in read_lines(out)}
    assert cancelled | refused == set(ids)
    assert cancelled and refused, "the cancels should straddle the due times"
    assert not cancelled & delivered
    assert refused <= delivered
    assert delivered == set(ids) - cancelled


@pytest.mark.slow
def test_a_hot_second_is_claimed_by_every_partition(spark, env, tmp_path):
    """20 000 schedules due in the same second: the batch that claims them spreads them over
    every bucket range (ids hash evenly over the buckets), so every Spark task takes a share
    rather than one taking all."""
    from tocsin.dispatcher.source import bucket_ranges

    store, url, out = env
    ids = _schedule(store, 20_000, due_ms=_now() + 3_000)
    with running_dispatcher(spark, url, tmp_path / "ck", buckets=16, partitions=4,
                            batch_cap=100_000):
        wait_until(lambda: store.counts()[Status.DELIVERED] == 20_000, timeout_s=120,
                   what="20 000 deliveries")
    wanted = set(ids)
    rows = [s for s in store.list_schedules(limit=100_000) if s.id in wanted]
    assert len(rows) == 20_000
    epochs = {s.claim_epoch for s in rows}
    # each task hands its share over in its window, under the window's epoch (twice when the
    # second straddled a window's end), or with a micro-batch's claim
    assert len(epochs) <= 2 * 4 + 2, epochs
    shares = [sum(1 for s in rows if lo <= s.bucket <= hi) for lo, hi in bucket_ranges(16, 4)]
    assert all(share > 20_000 * 0.15 for share in shares), shares
    assert len(read_lines(out)) == 20_000

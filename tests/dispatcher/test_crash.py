"""kill -9 of the dispatcher in the middle of a burst, then a restart: nothing is lost, and a
repeat carries the same delivery id."""

from __future__ import annotations

import collections
import time
from pathlib import Path

import pytest

from tests.support.dispatch import read_lines, wait_until
from tests.support.processes import kill_tree, start_tocsin
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores.sqlite import SQLiteStore

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 10_000


def test_kill_9_mid_burst_loses_nothing(tmp_path: Path) -> None:
    db, out = tmp_path / "tocsin.db", tmp_path / "out.jsonl"
    store = SQLiteStore(db, buckets=32)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    env = {"TOCSIN_STORE": f"sqlite:///{db}", "TOCSIN_CHECKPOINT": str(tmp_path / "ck"),
           "TOCSIN_BUCKETS": "32", "TOCSIN_SPARK_MASTER": "local[2]",
           "TOCSIN_TRIGGER_SECONDS": "0.5", "TOCSIN_LEASE_SECONDS": "15",
           "TOCSIN_BATCH_CAP": "2000"}
    first = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-1.log")
    try:
        # the burst starts once Spark is up, so the kill lands mid-burst
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=120,
                   what="the dispatcher to start")
        now = time.time_ns() // 1_000_000
        items = [NewSchedule(channel="out", payload=b'{"n": %d}' % i,
                             due_ms=now + 2_000 + 20_000 * i // N) for i in range(N)]
        ids = {s.id for s, _ in store.create(items, now_ms=now)}
        wait_until(lambda: len(read_lines(out)) > N // 4, timeout_s=120, what="a quarter")
    finally:
        kill_tree(first)
    delivered_at_kill = len(read_lines(out))
    assert delivered_at_kill < N, "the kill must land mid-burst for this test to mean anything"
    second = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-2.log")
    try:
        wait_until(lambda: {r["schedule_id"] for r in read_lines(out)} >= ids, timeout_s=240,
                   interval_s=1, what="every schedule delivered after the restart")
        wait_until(lambda: store.counts()[Status.DELIVERED] == N, timeout_s=60,
                   what="every schedule acknowledged")
    finally:
        kill_tree(second)
    lines = read_lines(out)
    by_schedule = collections.defaultdict(set)
    for line in lines:
        by_schedule[line["schedule_id"]].add(line["delivery_id"])
    assert set(by_schedule) == ids
    assert all(len(dids) == 1 for dids in by_schedule.values()), "a repeat changed delivery id"
    repeats = len(lines) - len(ids)
    print(f"kill -9 at {delivered_at_kill}/{N} delivered; repeats after restart: {repeats}")

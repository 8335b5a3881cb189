"""The dispatcher on separate executor JVMs (``local-cluster``): a lost executor's tasks run
again elsewhere, and nothing is lost or delivered under a new delivery id."""

from __future__ import annotations

import collections
import os
import signal
import time
from pathlib import Path

import pytest

from tests.support.dispatch import read_lines, wait_until
from tests.support.processes import executor_jvms, kill_tree, start_tocsin
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores.sqlite import SQLiteStore

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 20_000


def test_kill_9_of_an_executor_jvm_loses_nothing(tmp_path: Path) -> None:
    db, out = tmp_path / "tocsin.db", tmp_path / "out.jsonl"
    store = SQLiteStore(db, buckets=32)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    env = {"TOCSIN_STORE": f"sqlite:///{db}", "TOCSIN_CHECKPOINT": str(tmp_path / "ck"),
           "TOCSIN_BUCKETS": "32", "TOCSIN_SPARK_MASTER": "local-cluster[2,1,1024]",
           "TOCSIN_TRIGGER_SECONDS": "0.5", "TOCSIN_LEASE_SECONDS": "20",
           "TOCSIN_BATCH_CAP": "2000", "TOCSIN_PARTITIONS": "4"}
    proc = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher.log")
    try:
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=180,
                   what="the dispatcher to start")
        now = time.time_ns() // 1_000_000
        items = [NewSchedule(channel="out", payload=b'{"n": %d}' % i,
                             due_ms=now + 1_000 + 20_000 * i // N) for i in range(N)]
        ids = {s.id for s, _ in store.create(items, now_ms=now)}
        wait_until(lambda: len(read_lines(out)) > N // 5, timeout_s=180, what="a fifth")
        victims = executor_jvms(proc.pid)
        assert len(victims) == 2, f"expected two executor JVMs, found {victims}"
        os.kill(victims[0], signal.SIGKILL)
        killed_at = len(read_lines(out))
        wait_until(lambda: {r["schedule_id"] for r in read_lines(out)} >= ids, timeout_s=300,
                   interval_s=1, what="every schedule delivered after the executor died")
        wait_until(lambda: store.counts()[Status.DELIVERED] == N, timeout_s=120,
                   what="every schedule acknowledged")
    finally:
        kill_tree(proc)
    lines = read_lines(out)
    by_schedule = collections.defaultdict(set)
    for line in lines:
        by_schedule[line["schedule_id"]].add(line["delivery_id"])
    assert set(by_schedule) == ids
    assert all(len(d) == 1 for d in by_schedule.values()), "a repeat changed delivery id"
    print(f"executor killed at {killed_at}/{N}; repeats: {len(lines) - N}")

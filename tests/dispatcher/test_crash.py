"""kill -9 of the dispatcher in the middle of a burst, then a restart: nothing is lost, and a
repeat carries the same delivery id."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tocsin.domain import Status
from tocsin.testing.dispatch import (
    assert_each_delivered_under_one_id,
    dispatcher_env,
    file_store,
    read_lines,
    schedule_burst,
    wait_until,
)
from tocsin.testing.processes import kill_tree, start_tocsin

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 10_000


def test_kill_9_mid_burst_loses_nothing(tmp_path: Path, say: Callable[[str], None]) -> None:
    store, out = file_store(tmp_path, buckets=32)
    env = dispatcher_env(tmp_path, buckets=32, master="local[*]", lease_s=15)
    first = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-1.log")
    try:
        # the burst starts once Spark is up, so the kill lands mid-burst
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=120,
                   what="the dispatcher to start")
        ids = schedule_burst(store, N, start_in_ms=2_000, over_ms=20_000)
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
    repeats = assert_each_delivered_under_one_id(out, ids)
    say(f"kill -9 at {delivered_at_kill}/{N} delivered; repeats after restart: {repeats}")

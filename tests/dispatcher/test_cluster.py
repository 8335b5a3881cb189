"""The dispatcher on separate executor JVMs (``local-cluster``): a lost executor's tasks run
again elsewhere, and nothing is lost or delivered under a new delivery id."""

from __future__ import annotations

import os
import signal
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
from tocsin.testing.processes import executor_jvms, kill_tree, start_tocsin

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 20_000


def test_kill_9_of_an_executor_jvm_loses_nothing(tmp_path: Path,
                                                 say: Callable[[str], None]) -> None:
    store, out = file_store(tmp_path, buckets=32)
    env = dispatcher_env(tmp_path, buckets=32, master="local-cluster[2,4,1024]", lease_s=20,
                         TOCSIN_PARTITIONS="4")
    proc = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher.log")
    try:
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=180,
                   what="the dispatcher to start")
        ids = schedule_burst(store, N, start_in_ms=1_000, over_ms=20_000)
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
    repeats = assert_each_delivered_under_one_id(out, ids)
    say(f"executor killed at {killed_at}/{N}; repeats: {repeats}")

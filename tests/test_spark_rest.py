"""A local session at rest gives its memory back: its idle Python workers are stopped by
Spark's own monitor within seconds of being marked idle, instead of a minute after their last
task, and a job after that runs on new ones (:mod:`tocsin.spark.rest`)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tocsin.spark.rest import AtRest, retire_idle_workers

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _worker_pids(spark: SparkSession) -> set[int]:
    """The Python workers that ran a small job's tasks."""
    return set(spark.sparkContext.parallelize(range(8), 4).map(lambda _: os.getpid()).collect())


def _gone(pids: set[int], within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not any(Path(f"/proc/{pid}").exists() for pid in pids):
            return True
        time.sleep(0.25)
    return False


def test_marked_idle_workers_are_stopped_at_sparks_next_check(spark: SparkSession) -> None:
    before = _worker_pids(spark)
    assert retire_idle_workers(spark.sparkContext) >= 1
    assert _gone(before, within_s=15), "Spark's monitor checks every 10 s"
    after = _worker_pids(spark)
    assert after and not after & before  # new workers, and the job ran


def test_a_session_at_rest_gives_back_once_per_rest(spark: SparkSession) -> None:
    rest = AtRest(spark.sparkContext, rest_s=1.0, check_s=0.25).start()
    try:
        time.sleep(2)
        assert rest.rests == 0  # nothing ran since it started watching: nothing to give back
        busy = _worker_pids(spark)
        assert _gone(busy, within_s=20)
        assert rest.rests == 1
        time.sleep(2)
        assert rest.rests == 1  # still at rest: nothing more to do until the next job
        _worker_pids(spark)
        deadline = time.monotonic() + 10
        while rest.rests < 2 and time.monotonic() < deadline:
            time.sleep(0.25)
        assert rest.rests == 2
    finally:
        rest.stop()

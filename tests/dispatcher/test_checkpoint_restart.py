"""A dispatcher restarted elsewhere resumes from its checkpoint: the second driver runs in
another working directory (its own relative ``TOCSIN_HOME``), standing in for another host,
and finds the first one's ``file://`` checkpoint."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest

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

N = 200


def _batches(checkpoint: Path) -> list[int]:
    """The micro-batches a query's checkpoint has committed."""
    commits = checkpoint / "commits"
    return sorted(int(p.name) for p in commits.iterdir() if p.name.isdigit()) \
        if commits.is_dir() else []


def _delivered(out: Path, ids: frozenset[str]) -> bool:
    return {r["schedule_id"] for r in read_lines(out)} >= ids


def test_a_restart_from_another_directory_resumes(tmp_path: Path,
                                                  say: Callable[[str], None]) -> None:
    store, out = file_store(tmp_path, buckets=8)
    shared = tmp_path / "shared" / "ck"
    env = dispatcher_env(tmp_path, buckets=8, master="local[2]", lease_s=15,
                         TOCSIN_HOME=".tocsin", TOCSIN_CHECKPOINT=f"file://{shared}",
                         TOCSIN_RECURRING_EXPANDER="spark")  # a query of its own, checkpointed
    hosts = [tmp_path / "host-a", tmp_path / "host-b"]
    ids: set[str] = set()
    seen: list[list[int]] = []
    for n, host in enumerate(hosts, 1):
        host.mkdir()
        proc = start_tocsin("dispatcher", env=env, log=tmp_path / f"dispatcher-{n}.log",
                            cwd=host)
        try:
            ids |= schedule_burst(store, N, start_in_ms=1_000, over_ms=2_000)
            wait_until(partial(_delivered, out, frozenset(ids)),
                       timeout_s=240, interval_s=1, what=f"run {n} delivers")
            # every query of this run has committed a batch past those before it
            wait_until(lambda: len(_batches(shared / "dispatcher")) > sum(map(len, seen)),
                       timeout_s=60, what=f"run {n} commits")
            wait_until(lambda: (shared / "expander" / "metadata").is_file(),
                       timeout_s=120, what=f"run {n}'s expander query")
        finally:
            kill_tree(proc, sig=15)
        seen.append(_batches(shared / "dispatcher"))
    first, both = seen
    # one log of batches across both runs: the second went on where the first stopped
    assert both[:len(first)] == first and both[len(first)] == first[-1] + 1
    for query in ("dispatcher", "expander"):  # the relay is a thread: no checkpoint
        assert (shared / query / "metadata").is_file(), query
    for host in hosts:  # neither driver wrote a checkpoint of its own under its home
        assert not (host / ".tocsin" / "checkpoint").exists()
    repeats = assert_each_delivered_under_one_id(out, ids)
    say(f"batches {first[0]}..{first[-1]} then {both[len(first)]}..{both[-1]}; "
        f"{len(ids)} delivered, {repeats} repeats")

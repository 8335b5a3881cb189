"""``tocsin up`` as a user runs it, with a webhook channel to a recording receiver: ready means
warm, and kill -9 of the whole process group mid-burst loses nothing, repeats only under the
same delivery id, and the dead run's claims go out long before their lease would end."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tocsin.clock import SystemClock
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import wait_until
from tocsin.testing.processes import kill_tree, start_tocsin
from tocsin.testing.receiver import Receiver

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 3_000
LEASE_S = 120  # the default: the dead run's claims must not wait for it


class Up:
    """``tocsin up`` in its own process group over a SQLite store in ``tmp_path``, with a
    webhook channel ``hook`` to ``receiver``."""

    def __init__(self, tmp_path: Path, receiver: Receiver) -> None:
        self.tmp_path = tmp_path
        self.api = f"http://127.0.0.1:{free_port()}"
        self.env = {"TOCSIN_HOME": str(tmp_path / "home"),
                    "TOCSIN_API_PORT": self.api.rsplit(":", 1)[1],
                    "TOCSIN_SPARK_MASTER": "local[*]", "TOCSIN_TRIGGER_SECONDS": "0.5",
                    "TOCSIN_BUCKETS": "16", "TOCSIN_BATCH_CAP": "2000",
                    "TOCSIN_LEASE_SECONDS": str(LEASE_S)}
        self.store = SQLiteStore(tmp_path / "home" / "tocsin.db", buckets=16)
        self.store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                                           config={"url": f"{receiver.url}/in"}))
        self.starts = 0

    def start(self) -> tuple[Any, float]:
        """Start ``tocsin up``; the process and how long until ``/readyz`` said ready."""
        self.starts += 1
        began = time.monotonic()
        proc = start_tocsin("up", env=self.env, log=self.tmp_path / f"up-{self.starts}.log")
        wait_until(self.ready, timeout_s=240, interval_s=0.1, what="tocsin up ready")
        return proc, time.monotonic() - began

    def ready(self) -> bool:
        try:
            return httpx.get(f"{self.api}/readyz", timeout=2).status_code == 200
        except httpx.TransportError:
            return False

    def schedule(self, n: int, *, start_in_ms: int, over_ms: int = 0) -> list[str]:
        now = SystemClock().now_ms()
        items = [NewSchedule(channel="hook", payload=b'{"n": %d}' % i,
                             due_ms=now + start_in_ms + over_ms * i // max(n, 1))
                 for i in range(n)]
        return [s.id for s, _ in self.store.create(items, now_ms=now)]


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as receiver:
        yield receiver


def _delivery_ids(receiver: Receiver) -> dict[str, set[str]]:
    by_schedule: dict[str, set[str]] = defaultdict(set)
    for record in receiver.received():
        by_schedule[record.headers["tocsin-schedule-id"]].add(
            record.headers["tocsin-delivery-id"])
    return by_schedule


def _settle(up: Up) -> int:
    """Wait until the store's DELIVERED count stops moving; how much it moved."""
    before = last = up.store.counts()[Status.DELIVERED]
    while True:
        time.sleep(1)
        now = up.store.counts()[Status.DELIVERED]
        if now == last:
            return now - before
        last = now


def test_ready_means_warm(tmp_path: Path, receiver: Receiver,
                          say: Callable[[str], None]) -> None:
    up = Up(tmp_path, receiver)
    proc, took = up.start()
    try:
        # ready only once this run's first batch ran (workers started, channels open)
        [run, *_] = up.store.runs()
        assert run.ready_ms is not None
        [sid] = up.schedule(1, start_in_ms=1_000)
        due = up.store.get(sid).due_ms
        wait_until(lambda: receiver.received(), timeout_s=60, what="the first schedule")
        [record] = receiver.received()
        assert record.headers["tocsin-schedule-id"] == sid
        late_ms = record.at_ms - due
        say(f"ready after {took:.1f} s; first schedule due 1 s after ready: {late_ms} ms late")
        assert late_ms < 5_000  # generous: the figure that matters is printed, and in bench/
    finally:
        kill_tree(proc, sig=15)


def test_kill_9_mid_burst_then_restart(tmp_path: Path, receiver: Receiver,
                                       say: Callable[[str], None]) -> None:
    up = Up(tmp_path, receiver)
    first, _ = up.start()
    try:
        ids = set(up.schedule(N, start_in_ms=2_000, over_ms=5_000))
        wait_until(lambda: len(receiver.received()) > N // 4, timeout_s=120, what="a quarter")
    finally:
        kill_tree(first)  # kill -9 of the whole process group
    at_kill = len(receiver.received())
    assert at_kill < N, "the kill must land mid-burst for this test to mean anything"
    # Spark's Python workers run under its daemon, in a process group of their own: they
    # outlive the kill until the daemon sees its JVM gone, finishing what they hold. What is
    # still claimed once they have stopped is the dead run's to resume.
    settled = _settle(up)
    claimed = {s.id for s in up.store.list_schedules(status=Status.CLAIMED, limit=N)}
    second, took = up.start()
    ready_ms = SystemClock().now_ms()
    try:
        wait_until(lambda: set(_delivery_ids(receiver)) >= ids, timeout_s=240, interval_s=0.5,
                   what="every schedule received after the restart")
        wait_until(lambda: up.store.counts()[Status.DELIVERED] == N, timeout_s=60,
                   what="every schedule acknowledged")
    finally:
        kill_tree(second, sig=15)
    by_schedule = _delivery_ids(receiver)
    assert set(by_schedule) == ids
    changed = {s: d for s, d in by_schedule.items() if len(d) > 1}
    assert not changed, f"a repeat changed its delivery id: {list(changed.items())[:3]}"
    resumed = [max(r.at_ms for r in receiver.received()
                   if r.headers["tocsin-schedule-id"] == s) - ready_ms for s in claimed]
    worst = max(resumed, default=0)
    say(f"kill -9 at {at_kill}/{N} received ({settled} acknowledged by orphaned workers "
        f"after it), {len(claimed)} left claimed by the dead run; ready "
        f"{took:.1f} s after the restart; the last claimed one out {worst} ms after ready "
        f"(negative: before, by the replay of the dead run's batch); "
        f"repeats: {len(receiver.received()) - N}")
    assert worst < LEASE_S * 1000 // 2  # generous, but far inside the lease they once waited

"""Two thousand destinations through the real dispatcher (``tocsin dispatcher``, Spark): every
schedule delivered, the dispatcher's Python threads bounded whatever the number of
destinations, and a kill -9 in the middle loses nothing (a repeat keeps its delivery id)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from tocsin.testing.dispatch import dispatcher_env, file_store, wait_until
from tocsin.testing.processes import descendants, kill_tree, start_tocsin

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("machine_to_itself")]

DESTINATIONS = 2_000
TENANTS = 20
SCHEDULES = 4_000
SPREAD_MS = 20_000
THREAD_BOUND = 200
"""Threads of the dispatcher's Python processes (the driver and Spark's Python workers), JVMs
left out. The fixed engine and Spark's own need well under this (about 110 here) whatever the
number of destinations; the lanes it replaced had at least two threads per destination."""


def python_threads(root: int) -> int:
    """Threads of ``root`` and every Python process under it (JVMs left out)."""
    total = 0
    for pid in [root, *descendants(root)]:
        try:
            if b"java" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]:
                continue
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        total += int(status.split("Threads:", 1)[1].split()[0])
    return total


class Peak:
    """The peak of :func:`python_threads` under a process, sampled every 0.25 s."""

    def __init__(self) -> None:
        self.threads = 0
        self._stop = threading.Event()

    def watch(self, root: int) -> threading.Thread:
        def run() -> None:
            while not self._stop.wait(0.25):
                self.threads = max(self.threads, python_threads(root))

        self._stop.clear()
        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        return thread

    def stop(self, thread: threading.Thread) -> None:
        self._stop.set()
        thread.join(5)


def test_two_thousand_destinations_on_bounded_threads_through_a_kill(
        tmp_path: Path, say: Callable[[str], None]) -> None:
    from tocsin.clock import SystemClock
    from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Outcome
    from tocsin.testing.receiver import Receiver

    receiver = Receiver().start()
    store, _ = file_store(tmp_path, buckets=32)
    specs = [ChannelSpec(name=f"d{i // TENANTS:04d}", kind=ChannelKind.WEBHOOK,
                         tenant=f"t{i % TENANTS:02d}", config={"url": f"{receiver.url}/many"})
             for i in range(DESTINATIONS)]
    for spec in specs:
        store.put_channel(spec)
    env = dispatcher_env(tmp_path, buckets=32, master="local[2]", lease_s=15)
    peak = Peak()
    first = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-1.log")
    watcher = peak.watch(first.pid)
    try:
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=180,
                   what="the dispatcher to start")
        now = SystemClock().now_ms()
        ids = {s.id for s, _ in store.create(
            [NewSchedule(channel=specs[i % DESTINATIONS].name,
                         tenant=specs[i % DESTINATIONS].tenant, payload=b"{}",
                         due_ms=now + 3_000 + i * SPREAD_MS // SCHEDULES)
             for i in range(SCHEDULES)], now_ms=now)}

        def received() -> set[str]:
            return {r.headers["tocsin-schedule-id"] for r in receiver.received()}

        wait_until(lambda: len(received()) >= SCHEDULES // 4, timeout_s=180,
                   what="a quarter delivered")
    finally:
        peak.stop(watcher)
        kill_tree(first)
    at_kill = len(received())
    assert at_kill < SCHEDULES, "the kill must land mid-run for this test to mean anything"
    second = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-2.log")
    watcher = peak.watch(second.pid)
    try:
        wait_until(lambda: received() >= ids, timeout_s=300, interval_s=1,
                   what="every schedule delivered after the restart")
    finally:
        peak.stop(watcher)
        kill_tree(second)
        receiver.stop()
    by_schedule: dict[str, set[str]] = {}
    for r in receiver.received():
        by_schedule.setdefault(r.headers["tocsin-schedule-id"], set()).add(
            r.headers["tocsin-delivery-id"])
    assert set(by_schedule) == ids
    # a repeat keeps its delivery id: only a recorded failure (a timeout of a loaded receiver
    # is one) moves a schedule on to its next attempt and id
    changed = {sid: d for sid, d in by_schedule.items() if len(d) > 1}
    logs = {sid: store.deliveries(sid) for sid in changed}
    unexplained = {sid: [(a.attempt, a.outcome, a.error) for a in log]
                   for sid, log in logs.items()
                   if not set(range(1, max(int(d.rsplit("-", 1)[1]) for d in changed[sid])))
                   <= {a.attempt for a in log if a.outcome is Outcome.RETRY}}
    assert not unexplained, list(unexplained.items())[:5]
    errors = sorted({a.error or "" for log in logs.values() for a in log if a.error})
    repeats = len(receiver.received()) - len(ids)
    say(f"{DESTINATIONS} destinations, {SCHEDULES} schedules: kill -9 at {at_kill}; repeats "
        f"{repeats}; retried after a recorded failure {len(changed)} {errors}; "
        f"peak Python threads {peak.threads} (bound {THREAD_BOUND})")
    assert 0 < peak.threads <= THREAD_BOUND

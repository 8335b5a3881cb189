"""Several ``tocsin dispatcher`` processes with identical settings on one PostgreSQL store:
they share the buckets (and one checkpoint setting) and take over from each other. kill -9,
SIGSTOP/SIGCONT and SIGTERM of one lose nothing, a repeat keeps its delivery id, and a run
that was fenced out has nothing acknowledged after its fence. Few processes on purpose: each
is a Spark application (10-30 s to start on two cores)."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tocsin.clock import SystemClock
from tocsin.dispatcher.query import FENCED_EXIT
from tocsin.dispatcher.runs import RUN_STALE_MS
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores import open_store
from tocsin.testing.dispatch import serving_runs, wait_serving, wait_until
from tocsin.testing.processes import freeze, kill_tree, start_tocsin, thaw
from tocsin.testing.receiver import Receiver

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.usefixtures("machine_to_itself")]

BUCKETS = 32
START_S = 240
"""Three Spark applications starting at once on two cores."""


class Group:
    """``tocsin dispatcher`` processes, all started with the same settings."""

    def __init__(self, tmp_path: Path, store_url: str) -> None:
        self.tmp = tmp_path
        self.env = {"TOCSIN_STORE": store_url, "TOCSIN_CHECKPOINT": str(tmp_path / "ck"),
                    "TOCSIN_BUCKETS": str(BUCKETS), "TOCSIN_PARTITIONS": "2",
                    "TOCSIN_SPARK_MASTER": "local[*]", "TOCSIN_TRIGGER_SECONDS": "0.5",
                    "TOCSIN_LEASE_SECONDS": "60"}
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self) -> subprocess.Popen[bytes]:
        proc = start_tocsin("dispatcher", env=self.env,
                            log=self.tmp / f"dispatcher-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                thaw(proc)
                kill_tree(proc)


@pytest.fixture
def group(tmp_path: Path, postgres_store_url: str) -> Iterator[Group]:
    made = Group(tmp_path, postgres_store_url)
    try:
        yield made
    finally:
        made.stop()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as r:
        yield r


def stream(store: Any, url: str, n: int, *, start_in_ms: int, over_ms: int) -> set[str]:
    """``n`` webhooks due evenly over ``over_ms`` from ``start_in_ms`` from now."""
    now = SystemClock().now_ms()
    made = store.create([NewSchedule(channel="hook", payload=b"{}",
                                     due_ms=now + start_in_ms + over_ms * i // n)
                         for i in range(n)], now_ms=now)
    return {s.id for s, _ in made}


def delivered_ids(receiver: Receiver) -> dict[str, set[str]]:
    """Delivery ids received, by schedule id."""
    got: dict[str, set[str]] = {}
    for r in receiver.received():
        got.setdefault(r.headers["tocsin-schedule-id"], set()).add(r.headers["tocsin-delivery-id"])
    return got


def p99_late_ms(receiver: Receiver, ids: set[str], *, after_ms: int = 0) -> int | None:
    """The p99 lateness (first arrival minus due time) of ``ids`` due at ``after_ms`` or later:
    a figure to report, not to assert (timing figures go in bench/)."""
    from datetime import datetime

    first: dict[str, int] = {}
    for r in receiver.received():
        sid = r.headers["tocsin-schedule-id"]
        due = int(datetime.fromisoformat(r.headers["tocsin-due-at"].replace("Z", "+00:00"))
                  .timestamp() * 1000)
        if sid in ids and due >= after_ms:
            first[sid] = min(first.get(sid, r.at_ms - due), r.at_ms - due)
    late = sorted(first.values())
    return late[len(late) * 99 // 100] if late else None


def first_arrivals(receiver: Receiver) -> dict[str, int]:
    """When each schedule id first arrived."""
    first: dict[str, int] = {}
    for r in receiver.received():
        sid = r.headers["tocsin-schedule-id"]
        first[sid] = min(first.get(sid, r.at_ms), r.at_ms)
    return first


def wait_delivered(store: Any, receiver: Receiver, ids: set[str], *, timeout_s: float) -> None:
    wait_until(lambda: set(delivered_ids(receiver)) >= ids, timeout_s=timeout_s, interval_s=0.5,
               what="every schedule received")
    wait_until(lambda: all(store.get(i).status is Status.DELIVERED for i in ids),
               timeout_s=60, interval_s=0.5, what="every schedule acknowledged")


def acknowledged_by(store_url: str, run: str, *, after_ms: int = 0) -> int:
    """Schedules DELIVERED under an epoch of ``run``, acknowledged after ``after_ms``."""
    import psycopg

    with psycopg.connect(store_url) as conn:
        return int(conn.execute(
            "SELECT count(*) FROM schedules s JOIN epoch_runs e ON e.epoch = s.claim_epoch "
            "WHERE e.run = %s AND s.status = 'DELIVERED' AND s.delivered_ms > %s",
            (run, after_ms)).fetchone()[0])


def fenced_ms(store_url: str, run: str) -> int | None:
    import psycopg

    with psycopg.connect(store_url) as conn:
        row = conn.execute("SELECT fenced_ms FROM runs WHERE run = %s", (run,)).fetchone()
        return None if row is None or row[0] is None else int(row[0])


def test_three_dispatchers_share_the_buckets_and_survive_kill_and_freeze(
        group: Group, receiver: Receiver, postgres_store_url: str,
        say: Callable[[str], None]) -> None:
    store = open_store(postgres_store_url, buckets=BUCKETS)
    store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                                  config={"url": receiver.url + "/hook"}))
    procs = [group.start() for _ in range(3)]
    owners = wait_serving(store, 3, timeout_s=START_S)
    slots = sorted(r.slot for r in store.runs() if r.run in owners)
    assert slots == [0, 1, 2]  # one checkpoint setting, a folder each
    assert sorted(b for ranges in owners.values() for lo, hi in ranges
                  for b in range(lo, hi + 1)) == list(range(BUCKETS))

    # 1. everything once, each dispatcher delivering its own share
    first = stream(store, receiver.url, 600, start_in_ms=2_000, over_ms=6_000)
    wait_delivered(store, receiver, first, timeout_s=90)
    by_run = {run: acknowledged_by(postgres_store_url, run) for run in owners}
    assert all(n > 0 for n in by_run.values()), by_run  # they divided the work
    assert sum(by_run.values()) == len(first)
    assert all(len(d) == 1 for d in delivered_ids(receiver).values())

    # 2. kill -9 of one mid-stream: its buckets and claims go to the others at once
    pid_of = {r.pid: r.run for r in store.runs()}
    victim = procs[0]
    killed_run = pid_of[victim.pid]
    second = stream(store, receiver.url, 800, start_in_ms=1_000, over_ms=8_000)
    wait_until(lambda: len(delivered_ids(receiver)) > len(first) + 200, timeout_s=60,
               what="the second stream under way")
    killed_at = SystemClock().now_ms()
    kill_tree(victim)
    wait_serving(store, 2, timeout_s=5, other_than=frozenset({killed_run}))
    wait_delivered(store, receiver, second, timeout_s=90)

    # 3. SIGSTOP of one: the others cover for it until it is fenced out after the beats'
    # timeout; on SIGCONT it exits and what it acknowledges after its fence is nothing
    frozen = procs[1]
    frozen_run = pid_of[frozen.pid]
    its_buckets = {b for o in store.owners() if o.run == frozen_run
                   for b in range(o.lo, o.hi + 1)}
    third = stream(store, receiver.url, 800, start_in_ms=1_000, over_ms=10_000)
    wait_until(lambda: len(delivered_ids(receiver)) > len(first) + len(second) + 100,
               timeout_s=60, what="the third stream under way")
    frozen_at = SystemClock().now_ms()
    freeze(frozen)
    wait_serving(store, 1, timeout_s=RUN_STALE_MS / 1000 + 10,
                 other_than=frozenset({frozen_run, killed_run}))
    fence = fenced_ms(postgres_store_url, frozen_run)
    assert fence is not None
    wait_delivered(store, receiver, third, timeout_s=90)
    # its schedules due while it was frozen did not wait for its fence: a live member covered
    covered = {sid: store.get(sid) for sid in third}
    covered = {sid: s for sid, s in covered.items() if s.bucket in its_buckets
               and frozen_at + 1_000 <= s.due_ms <= fence - 1_000}
    assert covered, "no schedule of the frozen run fell due before its fence"
    arrived = first_arrivals(receiver)
    assert all(arrived[sid] < fence for sid in covered), "waited for the fence"
    thaw(frozen)
    assert frozen.wait(timeout=60) == FENCED_EXIT
    assert acknowledged_by(postgres_store_url, frozen_run, after_ms=fence) == 0
    every = first | second | third
    got = delivered_ids(receiver)
    assert set(got) >= every  # nothing lost
    assert all(len(d) == 1 for d in got.values()), "a repeat changed delivery id"
    assert list(serving_runs(store)) == [pid_of[procs[2].pid]]
    repeats = len(receiver.received()) - len(got)
    before = p99_late_ms(receiver, first)
    after_kill = p99_late_ms(receiver, second, after_ms=killed_at)
    after_freeze = p99_late_ms(receiver, third, after_ms=frozen_at)
    say(f"3 dispatchers: shares {sorted(by_run.values())}; after kill -9 and SIGSTOP nothing "
        f"lost, {repeats} repeats (same delivery id); p99 lateness: before {before} ms, "
        f"after the kill {after_kill} ms, after the freeze {after_freeze} ms")
    store.close()


def test_sigterm_hands_the_buckets_over_and_a_rolling_restart_loses_nothing(
        group: Group, receiver: Receiver, postgres_store_url: str,
        say: Callable[[str], None]) -> None:
    store = open_store(postgres_store_url, buckets=BUCKETS)
    store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                                  config={"url": receiver.url + "/hook"}))
    procs = [group.start() for _ in range(2)]
    wait_serving(store, 2, timeout_s=START_S)
    ids = stream(store, receiver.url, 3_000, start_in_ms=2_000, over_ms=90_000)
    # the rolling restart: each in turn stops with SIGTERM and a new one takes its place
    for i in range(2):
        old = procs[i]
        old_run = next(r.run for r in store.runs() if r.pid == old.pid)
        old.send_signal(signal.SIGTERM)
        wait_serving(store, 1, timeout_s=5, other_than=frozenset({old_run}))
        assert old.wait(timeout=60) == 0
        assert store.run_claims(old_run) == 0  # it sent what it held, or handed it back
        procs[i] = group.start()
        wait_serving(store, 2, timeout_s=START_S, other_than=frozenset({old_run}))
    wait_delivered(store, receiver, ids, timeout_s=120)
    got = delivered_ids(receiver)
    assert set(got) == ids and all(len(d) == 1 for d in got.values())
    say(f"rolling restart of 2 dispatchers: {len(ids)} delivered, "
        f"{len(receiver.received()) - len(ids)} repeats; p99 lateness "
        f"{p99_late_ms(receiver, ids)} ms")
    store.close()

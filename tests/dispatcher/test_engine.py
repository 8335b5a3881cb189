"""The delivery engine on the Spark-free core, both stores, stepped and on its own threads:
breakers, a full destination held, sends that pass their deadline, a slow destination that
waits alone, backlogs that pull, an ordered stop, threads that do not grow with destinations."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from functools import partial

import pytest

from tocsin.abc import Channel, ChannelHold, ClaimedRow, Store
from tocsin.channels.shared import LoopChannel
from tocsin.clock import ManualClock
from tocsin.dispatcher.breaker import Breaker, BreakerPolicy, BreakerState
from tocsin.dispatcher.channel_cache import ChannelCache
from tocsin.dispatcher.core import DispatchCore, channel_spec
from tocsin.dispatcher.knobs import (
    ADOPT_MS,
    ADOPT_QUIET_MS,
    AHEAD_CHUNKS,
    BACKLOG_LAG_MS,
    BACKLOG_NICE,
    LINGER_MS,
    SEND_GRACE_MS,
)
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.workers import ThreadedWorkers, Workers
from tocsin.domain import (
    ChannelKind,
    ChannelSpec,
    Envelope,
    HoldReason,
    NewSchedule,
    Outcome,
    Result,
    Status,
)
from tocsin.stores import open_store
from tocsin.testing.dispatch import wait_until

NOW = 1_900_000_000_000
BUSY, OPEN = HoldReason.BUSY, HoldReason.OPEN
SLOW_MS = 40_000
"""A ``slow`` destination's send moves the manual clock on this much."""
SEND_THREADS = 4


@dataclass
class Destinations:
    """How each fake destination answers: ``ok``, ``fail`` (RETRY), ``hang`` (until
    ``release`` is set) or ``slow`` (moves the clock on); what each took; every channel's
    ``send``, ``sent`` and ``close``, in order."""

    clock: ManualClock
    modes: dict[str, str] = field(default_factory=dict)
    got: dict[str, list[str]] = field(default_factory=dict)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    events: list[str] = field(default_factory=list)


class FakeChannel(Channel):
    def __init__(self, spec: ChannelSpec, destinations: Destinations) -> None:
        self.spec = spec
        self.destinations = destinations

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        d = self.destinations
        mode = d.modes.get(self.spec.name, "ok")
        d.events.append(f"send {self.spec.name}")
        if mode == "hang":
            d.release.wait(30)
        if mode == "slow":
            d.clock.advance(SLOW_MS)
        d.events.append(f"sent {self.spec.name}")
        if mode == "fail":
            return [Result(e.delivery_id, Outcome.RETRY, "HTTP 503 Service Unavailable")
                    for e in envelopes]
        with d.lock:
            d.got.setdefault(self.spec.name, []).extend(e.schedule_id for e in envelopes)
        return [Result(e.delivery_id, Outcome.DELIVERED) for e in envelopes]

    def close(self) -> None:
        self.destinations.events.append(f"close {self.spec.name}")


class AsyncFakeChannel(LoopChannel):
    """:class:`FakeChannel` with an asynchronous client: its sends run on the channel loop."""

    def __init__(self, spec: ChannelSpec, destinations: Destinations) -> None:
        self.spec = spec
        self.destinations = destinations

    async def _send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        d = self.destinations
        while d.modes.get(self.spec.name) == "hang" and not d.release.is_set():
            await asyncio.sleep(0.01)
        with d.lock:
            d.got.setdefault(self.spec.name, []).extend(e.schedule_id for e in envelopes)
        return [Result(e.delivery_id, Outcome.DELIVERED) for e in envelopes]

    def close(self) -> None:
        pass


class CountingWorkers(ThreadedWorkers):
    """The engine's threads, counting the jobs given to the send pools."""

    jobs = 0

    def send(self, job: Callable[[], None], *, backlog: bool) -> None:
        self.jobs += 1
        super().send(job, backlog=backlog)


@dataclass
class Rig:
    store: Store
    clock: ManualClock
    core: DispatchCore
    destinations: Destinations

    def add(self, channel: str, n: int, due_ms: int | None = None) -> list[str]:
        made = self.store.create([NewSchedule(channel=channel, payload=b"{}",
                                              due_ms=self.clock.now_ms() if due_ms is None
                                              else due_ms) for _ in range(n)],
                                 now_ms=self.clock.now_ms())
        return [s.id for s, _ in made]

    def claim(self, limit: int = 1000) -> list[ClaimedRow]:
        now = self.clock.now_ms()
        return self.store.claim(epoch=self.store.next_epoch(), bucket_lo=0, bucket_hi=7,
                                until_ms=now, now_ms=now, lease_ms=120_000, limit=limit)

    def status(self, ids: list[str]) -> list[Status]:
        return [self.store.get(i).status for i in ids]


def _rig(backend_url: str, *, threaded: bool, names: Sequence[str] = ("up", "down", "slow"),
         build: Callable[[ChannelSpec, Destinations], Channel] = FakeChannel,
         build_deadline_s: float | None = None, workers: Workers | None = None,
         **settings: object) -> Iterator[Rig]:
    store = open_store(backend_url, buckets=8)
    clock = ManualClock(NOW)
    destinations = Destinations(clock)
    for name in names:
        store.put_channel(ChannelSpec(name=name, kind=ChannelKind.FILE,
                                      config={"path": f"{name}.jsonl"}))
    cache = ChannelCache(partial(channel_spec, store), clock=clock,
                         build=lambda spec: build(spec, destinations),
                         build_deadline_s=build_deadline_s)
    options = DispatchOptions(store_url=backend_url, buckets=8, breaker_failures=3,
                              breaker_open_ms=5_000, breaker_max_open_ms=60_000)
    core = DispatchCore(store, options=options, clock=clock, channels=cache,
                        workers=workers or (ThreadedWorkers(send_threads=SEND_THREADS)
                                            if threaded else None))
    core.engine.settings = replace(core.engine.settings, **settings)  # type: ignore[arg-type]
    try:
        yield Rig(store, clock, core, destinations)
    finally:
        destinations.release.set()
        core.close()
        store.close()


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    yield from _rig(backend_url, threaded=False, chunk_rows=1)


@pytest.fixture
def threaded_rig(backend_url: str) -> Iterator[Rig]:
    yield from _rig(backend_url, threaded=True, min_rows=4, send_deadline_ms=300)


ENGINE_THREADS = ("tocsin-engine", "tocsin-writer", "tocsin-puller", "tocsin-send",
                  "tocsin-backlog")


def engine_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith(ENGINE_THREADS)]


def test_a_breaker_opens_after_failures_in_a_row_and_a_probe_closes_it() -> None:
    breaker = Breaker(BreakerPolicy(failures=3, open_ms=1_000, max_open_ms=3_000))
    assert not breaker.record(Outcome.RETRY, "x", now_ms=0)
    assert not breaker.record(Outcome.REJECTED, None, now_ms=0)  # an answer resets the count
    opened = [breaker.record(Outcome.RETRY, "timeout", now_ms=t) for t in (1, 2, 3)]
    assert opened == [False, False, True] and breaker.state is BreakerState.OPEN
    assert breaker.until_ms == 1_003 and not breaker.due_probe(1_002)
    assert breaker.due_probe(1_003) and breaker.state is BreakerState.PROBING
    assert breaker.record(Outcome.RETRY, "timeout", now_ms=1_010)  # a failed probe: twice as long
    assert breaker.until_ms == 3_010
    breaker.due_probe(3_010)
    assert breaker.record(Outcome.RETRY, "timeout", now_ms=3_020)
    assert breaker.until_ms == 6_020  # capped at max_open_ms
    breaker.due_probe(6_020)
    assert not breaker.record(Outcome.DELIVERED, None, now_ms=6_030)
    assert breaker.state is BreakerState.CLOSED and breaker.failures == 0


def test_an_open_breaker_holds_its_destination_and_hands_back_unsent(rig: Rig) -> None:
    rig.destinations.modes["down"] = "fail"
    down, up = rig.add("down", 6), rig.add("up", 2)
    tally = rig.core.deliver(rig.claim())
    # three attempts fail and open the breaker; the other three go back PENDING, unattempted
    assert tally.delivered == 2 and tally.retried == 3
    [hold] = rig.store.channel_holds()
    assert (hold.name, hold.reason, hold.failures) == ("down", OPEN, 3)
    assert hold.until_ms == NOW + 5_000 and "503" in (hold.last_error or "")
    after = [rig.store.get(i) for i in down]
    assert sorted(s.attempts for s in after) == [0, 0, 0, 1, 1, 1]
    assert {s.status for s in after} == {Status.PENDING}
    # while it is open the claim passes over it; another destination goes on
    rig.clock.advance(100)
    more_up = rig.add("up", 2)
    claimed = rig.claim()
    assert {r.channel for r in claimed} == {"up"}
    rig.core.deliver(claimed)
    assert len(rig.destinations.got["up"]) == 4
    # its time up: one probe, which fails, opens it twice as long
    rig.clock.advance(5_000)
    rig.core.watch_runs(rig.clock.now_ms())
    assert rig.store.channel_holds() == []
    tally = rig.core.deliver(rig.claim())
    assert tally.retried == 1, "only the probe was sent"
    [hold] = rig.store.channel_holds()
    assert hold.until_ms == rig.clock.now_ms() + 10_000
    # the destination recovers: the next probe closes the breaker and the rest follow
    rig.destinations.modes["down"] = "ok"
    rig.clock.advance(60_000)
    rig.core.watch_runs(rig.clock.now_ms())
    rig.core.deliver(rig.claim())
    assert rig.status(down) == [Status.DELIVERED] * 6
    assert sorted(rig.destinations.got["down"]) == sorted(down)  # each once
    assert rig.status(up + more_up) == [Status.DELIVERED] * 4


def test_a_full_destination_is_held_while_others_go_on(threaded_rig: Rig) -> None:
    rig = threaded_rig
    rig.destinations.modes["slow"] = "hang"
    slow = rig.add("slow", 12)
    rig.core.deliver(rig.claim())  # one chunk is stuck in the send, the rest queued: full
    wait_until(lambda: [h.reason for h in rig.store.channel_holds()] == [BUSY], timeout_s=5,
               what="the busy hold")
    rig.clock.advance(100)
    late_slow, up = rig.add("slow", 3), rig.add("up", 3)
    claimed = rig.claim()
    assert {r.channel for r in claimed} == {"up"}, "the held destination was passed over"
    rig.core.deliver(claimed)
    wait_until(lambda: rig.status(up) == [Status.DELIVERED] * 3, timeout_s=5,
               what="the other destination's deliveries")
    assert rig.status(late_slow) == [Status.PENDING] * 3
    rig.destinations.release.set()
    rig.destinations.modes["slow"] = "ok"
    wait_until(lambda: rig.status(slow) == [Status.DELIVERED] * 12, timeout_s=10,
               what="the slow destination's deliveries")
    wait_until(lambda: rig.store.channel_holds() == [], timeout_s=5, what="the hold's end")


def test_a_send_past_its_deadline_is_retried_and_holds_no_one_else(threaded_rig: Rig) -> None:
    rig = threaded_rig
    rig.destinations.modes["slow"] = "hang"
    [stuck] = rig.add("slow", 1)
    up = rig.add("up", 5)
    rig.core.deliver(rig.claim())
    wait_until(lambda: rig.status(up) == [Status.DELIVERED] * 5, timeout_s=2,
               what="the healthy destination's deliveries while the other hangs")
    assert rig.status([stuck]) == [Status.CLAIMED]
    rig.clock.advance(300 + SEND_GRACE_MS)  # the deadline is the engine clock's
    wait_until(lambda: rig.store.get(stuck).status is Status.PENDING, timeout_s=10,
               what="the hung send's deadline")
    after = rig.store.get(stuck)
    assert after.attempts == 1 and after.last_error == "no answer within the send deadline"


def test_a_claimed_row_round_trips_through_arrow_by_name() -> None:
    pytest.importorskip("pyarrow")
    from tocsin.dispatcher.source import SPARK_SCHEMA, arrow_schema, from_arrow, to_arrow

    rows = [ClaimedRow("a", "t", "c", b"\x00x", "json", "{}", 5, 1, None, "k", 3, 0),
            ClaimedRow("b", "t", "c", b"", "text", '{"h":"v"}', 6, 2, "key", None, 3, 1)]
    assert arrow_schema().names == list(ClaimedRow._fields)
    assert SPARK_SCHEMA.split(", ")[0] == "id string"
    assert [c.split()[0] for c in SPARK_SCHEMA.split(", ")] == arrow_schema().names
    assert from_arrow(to_arrow(rows)) == rows
    assert from_arrow(to_arrow([])) == []


def test_each_process_ends_only_its_own_busy_hold(rig: Rig) -> None:
    store, now = rig.store, rig.clock.now_ms()
    for holder in ("host:1", "host:2"):
        store.hold_channel(ChannelHold("default", "up", BUSY, now, now + 10_000, 0, None, holder))
    up = rig.add("up", 1)
    assert rig.claim() == [], "held while either process holds it"
    store.unhold_channel("default", "up", reason=BUSY, holder="host:1")
    assert [h.holder for h in store.channel_holds()] == ["host:2"]
    assert rig.claim() == []
    store.hold_channel(ChannelHold("default", "up", OPEN, now, now + 5_000, 5, "timeout"))
    store.unhold_channel("default", "up", reason=BUSY, holder="host:2")
    assert [(h.reason, h.holder) for h in store.channel_holds()] == [(OPEN, "")]
    store.expire_holds(now_ms=now + 5_000)
    assert [r.id for r in rig.claim()] == up


def test_a_destination_sends_on_while_its_acknowledgement_waits(backend_url: str) -> None:
    """The store's writer is busy (an acknowledgement blocks): the destination sends its next
    chunks meanwhile, at most AHEAD_CHUNKS chunks ahead, and the rows read CLAIMED until
    their verdicts are written."""
    rig = next(rigs := _rig(backend_url, threaded=True, chunk_rows=2))
    try:
        release, calls = threading.Event(), []
        acknowledge = rig.store.acknowledge

        def slow_acknowledge(**kw: object) -> int:
            calls.append(len(kw["acks"]))  # type: ignore[arg-type]
            release.wait(10)
            return acknowledge(**kw)  # type: ignore[arg-type]

        rig.store.acknowledge = slow_acknowledge  # type: ignore[method-assign]
        first = rig.add("up", 2)
        rig.core.deliver(rig.claim())
        wait_until(lambda: calls == [2], timeout_s=5, what="the first acknowledgement")
        rig.clock.advance(10)
        more = rig.add("up", 8)
        rig.core.deliver(rig.claim())
        ahead = AHEAD_CHUNKS * 2
        wait_until(lambda: len(rig.destinations.got.get("up", [])) == ahead, timeout_s=5,
                   what="the next chunk sent while the first one's acknowledgement waits")
        assert rig.status(first + more) == [Status.CLAIMED] * 10
        release.wait(0.3)  # no further chunk goes out while AHEAD_CHUNKS wait
        assert len(rig.destinations.got["up"]) == ahead
        release.set()
        wait_until(lambda: rig.status(first + more) == [Status.DELIVERED] * 10, timeout_s=10,
                   what="every verdict written")
        assert sorted(rig.destinations.got["up"]) == sorted(first + more)
    finally:
        next(rigs, None)


def test_a_pull_takes_one_destinations_due_rows_past_its_busy_hold(rig: Rig) -> None:
    store, now = rig.store, rig.clock.now_ms()
    up, later, other = rig.add("up", 3), rig.add("up", 2, due_ms=now + 1_000), rig.add("slow", 2)
    keyed = store.create([NewSchedule(channel="up", payload=b"{}", due_ms=now, ordering_key="k")
                          for _ in range(2)], now_ms=now)
    store.hold_channel(ChannelHold("default", "up", BUSY, now, now + 10_000, 0, None, "host:1"))
    assert {r.channel for r in rig.claim()} == {"slow"}, "the windows pass the held one over"
    epoch = store.next_epoch()
    pulled = store.pull(epoch=epoch, tenant="default", channel="up", now_ms=now, limit=100)
    # due rows only, the key's head only, and only this destination
    assert sorted(r.id for r in pulled) == sorted([*up, keyed[0][0].id])
    assert {r.epoch for r in pulled} == {epoch}
    assert rig.status(up) == [Status.CLAIMED] * 3 and rig.status(later) == [Status.PENDING] * 2
    assert rig.status(other) == [Status.CLAIMED] * 2
    assert store.pull(epoch=epoch, tenant="default", channel="up", now_ms=now + 1_000,
                      limit=1) != [], "a limit, earliest first"
    store.hold_channel(ChannelHold("default", "up", OPEN, now, now + 5_000, 5, "timeout"))
    assert store.pull(epoch=epoch, tenant="default", channel="up", now_ms=now + 1_000,
                      limit=100) == [], "an open breaker is respected"
    store.unhold_channel("default", "up", reason=OPEN)
    store.pause_channel("up", tenant="default", now_ms=now)
    assert store.pull(epoch=epoch, tenant="default", channel="up", now_ms=now + 1_000,
                      limit=100) == [], "a pause is respected"


def test_a_backlogs_destination_takes_its_own_rows_while_the_windows_pass_it_over(
        threaded_rig: Rig) -> None:
    """A destination with a backlog holds its destination and claims its next rows itself, as it
    has room; the claims of the windows meanwhile take only the other destinations."""
    rig = threaded_rig
    rig.destinations.modes["slow"] = "hang"
    first = rig.add("slow", 10)
    rig.core.deliver(rig.claim())
    wait_until(lambda: [h.reason for h in rig.store.channel_holds()] == [BUSY], timeout_s=5,
               what="the backlog's hold")
    rig.clock.advance(100)
    backlog, up = rig.add("slow", 30), rig.add("up", 2)
    claimed = rig.claim()
    assert {r.channel for r in claimed} == {"up"}
    rig.core.deliver(claimed)
    wait_until(lambda: rig.status(up) == [Status.DELIVERED] * 2, timeout_s=5,
               what="the other destination's deliveries")
    assert rig.status(backlog) == [Status.PENDING] * 30, "nothing taken beyond its room"
    rig.destinations.modes["slow"] = "ok"
    rig.destinations.release.set()
    wait_until(lambda: rig.status(first + backlog) == [Status.DELIVERED] * 40, timeout_s=10,
               what="the backlog, taken by its own destination")
    assert sorted(rig.destinations.got["slow"]) == sorted(first + backlog), "each once"
    assert {rig.store.get(i).attempts for i in backlog} == {1}
    wait_until(lambda: rig.store.channel_holds() == [], timeout_s=5, what="the hold's end")


def test_a_backlog_another_process_pulls_is_pulled_here_too_and_let_go_when_done(
        rig: Rig) -> None:
    """The batches pass a busy destination over, so only pulls reach its backlog, and it
    stayed with the one process that first held it. A process without it takes a share when
    it looks (every ADOPT_MS while another is busy, ADOPT_QUIET_MS when none was at its last
    look), holds it while it pulls, and lets go when nothing is left;
    while no other process holds anything, or while the held destination is on time (no row
    due ADOPT_LAG_MS ago), it pulls nothing."""
    engine, store = rig.core.engine, rig.store
    engine.settings = replace(engine.settings, min_rows=4)
    held: list[str] = []
    hold = rig.core.hold

    def recorded_hold(h: ChannelHold) -> None:
        held.append(h.holder)
        hold(h)

    rig.core.hold = recorded_hold  # type: ignore[method-assign]
    ids = rig.add("up", 12)
    engine.pull_round()
    assert rig.status(ids) == [Status.PENDING] * 12, "no one else pulls: nothing to share"
    now = rig.clock.now_ms()
    store.hold_channel(ChannelHold("default", "up", BUSY, now, now + 60_000, 0, None, "else:1"))
    engine.pull_round()
    assert rig.status(ids) == [Status.PENDING] * 12, "looked less than ADOPT_MS ago"
    rig.clock.advance(ADOPT_MS)
    engine.pull_round()
    assert rig.status(ids) == [Status.PENDING] * 12, "nobody was busy: ADOPT_QUIET_MS"
    rig.clock.advance(ADOPT_QUIET_MS - ADOPT_MS)
    engine.pull_round()
    assert rig.status(ids) == [Status.DELIVERED] * 12
    assert sorted(rig.destinations.got["up"]) == sorted(ids)
    assert {store.get(i).attempts for i in ids} == {1}
    assert held and set(held) == {engine.holder} != {"else:1"}, "held by this process too"
    assert [h.holder for h in store.channel_holds()] == ["else:1"], "its own hold ended"
    assert engine.info() == [], "and the destination forgotten"
    rig.clock.advance(ADOPT_MS)
    fresh = rig.add("up", 3)  # due now: an on-time stream, not behind
    engine.pull_round()
    assert rig.status(fresh) == [Status.PENDING] * 3, "left to the process that holds it"
    rig.clock.advance(ADOPT_MS)  # now due longer ago than ADOPT_LAG_MS: behind
    engine.pull_round()
    assert rig.status(fresh) == [Status.DELIVERED] * 3


def test_a_process_shares_only_its_own_runs_backlogs_held_by_other_processes(
        rig: Rig) -> None:
    store, core, now = rig.store, rig.core, rig.clock.now_ms()
    core.options = replace(core.options, run="r1")
    me = core.engine.holder
    for name, holder in (("up", f"{me}@r1"), ("down", "else:1@r1"), ("slow", "else:2@r2")):
        store.hold_channel(ChannelHold("default", name, BUSY, now, now + 60_000, 0, None,
                                       holder))
    store.hold_channel(ChannelHold("default", "slow", OPEN, now, now + 5_000, 3, "timeout"))
    assert core.busy_elsewhere(me) == [("default", "down")]


def test_a_backlogs_destination_that_caught_up_takes_the_next_rows_at_their_instant(
        threaded_rig: Rig) -> None:
    """A puller that caught up keeps its destination while a schedule falls due within
    LINGER_MS and takes it at its instant (a burst goes on); once none does, it ends and the
    hold with it."""
    rig = threaded_rig
    rig.destinations.modes["slow"] = "hang"
    first = rig.add("slow", 10)
    rig.core.deliver(rig.claim())
    def pulling() -> bool:
        return any(i.pulling for i in rig.core.engine.info() if i.channel == "slow")

    wait_until(pulling, timeout_s=5, what="the backlog's puller")
    soon = rig.add("slow", 3, due_ms=rig.clock.now_ms() + LINGER_MS // 2)
    rig.destinations.modes["slow"] = "ok"
    rig.destinations.release.set()
    wait_until(lambda: rig.status(first) == [Status.DELIVERED] * 10, timeout_s=10,
               what="the backlog sent")
    time.sleep(0.3)  # the puller caught up: it waits for the next instant, holding on
    assert pulling() and [h.reason for h in rig.store.channel_holds()] == [BUSY]
    assert rig.status(soon) == [Status.PENDING] * 3, "nothing taken before it is due"
    rig.clock.advance(LINGER_MS // 2)
    wait_until(lambda: rig.status(soon) == [Status.DELIVERED] * 3, timeout_s=5,
               what="the next rows, taken by the puller at their instant")
    wait_until(lambda: not pulling() and rig.store.channel_holds() == [], timeout_s=5,
               what="the puller's end, nothing more due, and the hold's")


def test_only_a_destination_that_is_behind_yields_the_cpu(backend_url: str) -> None:
    """A destination pulls once min_rows wait: a backlog, or a stream so fast that its queue
    fills between two sends (5 000 webhooks a second queue 256 rows in 50 ms). Only one whose
    pull found a row due BACKLOG_LAG_MS ago pulls on the niced puller and sends on the niced
    pool; the fast stream on time keeps the dispatcher's priority (niced, it lost the CPU to
    each batch start and fell 1-2 s behind). Other destinations' sends keep it too."""
    import os

    rig = next(rigs := _rig(backend_url, threaded=True, min_rows=4, chunk_rows=2,
                            send_deadline_ms=300))
    try:
        pulled_by: dict[str, set[str]] = {}
        sent_niced: dict[str, set[bool]] = {}
        pull, workers = rig.core.pull, rig.core.engine.workers
        send = workers.send

        def recorded_pull(**kw: object) -> list[ClaimedRow]:
            rows = pull(**kw)  # type: ignore[arg-type]
            if rows:
                pulled_by.setdefault(str(kw["channel"]), set()).add(
                    threading.current_thread().name)
            return rows

        def recorded_send(job: Callable[[], None], *, backlog: bool) -> None:
            for (_, name), _, _ in getattr(job, "chunks", ()):
                sent_niced.setdefault(name, set()).add(backlog)
            send(job, backlog=backlog)

        rig.core.pull = recorded_pull  # type: ignore[method-assign]
        workers.send = recorded_send  # type: ignore[method-assign]
        now = rig.clock.now_ms()
        for name in ("up", "slow"):
            rig.destinations.modes[name] = "hang"
        up, slow = rig.add("up", 6), rig.add("slow", 6, due_ms=now - 2 * BACKLOG_LAG_MS)
        rig.core.deliver(rig.claim())
        wait_until(lambda: sorted(h.name for h in rig.store.channel_holds())
                   == ["slow", "up"], timeout_s=5, what="both held: both pull")
        up += rig.add("up", 6)  # due now: the fast stream is on time
        slow += rig.add("slow", 6, due_ms=now - 2 * BACKLOG_LAG_MS)  # behind
        for name in ("up", "slow"):
            rig.destinations.modes[name] = "ok"
        rig.destinations.release.set()
        wait_until(lambda: rig.status(up + slow) == [Status.DELIVERED] * 24, timeout_s=10,
                   what="both sent")
        assert pulled_by["up"] == {"tocsin-puller"} and sent_niced["up"] == {False}
        # its first pull could not know it was behind; every later one did
        assert pulled_by["slow"] == {"tocsin-puller", "tocsin-backlog-puller"}
        assert sent_niced["slow"] == {False, True}

        def nices(prefix: str) -> set[int]:
            return {os.getpriority(os.PRIO_PROCESS, t.native_id) for t in engine_threads()
                    if t.name.startswith(prefix) and t.native_id is not None}

        base = os.getpriority(os.PRIO_PROCESS, os.getpid())  # the suite may run under nice
        niced = min(19, base + BACKLOG_NICE)
        assert nices("tocsin-backlog") == {niced}, "the backlog's pool and puller"
        assert nices("tocsin-puller") == nices("tocsin-send") == nices("tocsin-engine") == {base}
    finally:
        next(rigs, None)


def test_rows_too_old_to_send_are_handed_back_when_stepped(backend_url: str) -> None:
    """Bug: the unthreaded path dropped the rows it found too old to send (they stayed
    CLAIMED until the lease). Stepped, the engine hands them back: PENDING, no attempt."""
    rig = next(rigs := _rig(backend_url, threaded=False, chunk_rows=1,
                            send_deadline_ms=600_000))
    try:
        rig.destinations.modes["slow"] = "slow"  # each send moves the clock on 40 s
        ids = rig.add("slow", 3)
        rig.core.deliver(rig.claim())  # the third row waited 80 s > max_wait_ms (60 s)
        assert rig.core.engine.settings.max_wait_ms == 60_000
        sent = rig.destinations.got["slow"]
        [left] = set(ids) - set(sent)
        assert len(sent) == 2 and rig.status(sent) == [Status.DELIVERED] * 2
        assert rig.store.get(left).status is Status.PENDING
        assert rig.store.get(left).attempts == 0
    finally:
        next(rigs, None)


@pytest.mark.parametrize("threaded", [False, True])
def test_rows_submitted_after_close_are_handed_back_at_once(backend_url: str,
                                                            threaded: bool) -> None:
    """Bug: rows submitted after close stayed CLAIMED until the lease."""
    rig = next(rigs := _rig(backend_url, threaded=threaded))
    try:
        ids = rig.add("up", 3)
        claimed = rig.claim()
        rig.core.close()
        rig.core.deliver(claimed)
        assert rig.status(ids) == [Status.PENDING] * 3
        assert {rig.store.get(i).attempts for i in ids} == {0}
        assert "up" not in rig.destinations.got
    finally:
        next(rigs, None)


def test_closing_waits_for_sends_in_flight_then_joins_then_closes_channels(
        threaded_rig: Rig) -> None:
    """Bug: closing shut channels with sends in flight and joined no thread. The ordered
    stop: the send in flight is answered and acknowledged, the queued rows go back PENDING,
    the engine's threads end, and only then are the channels closed."""
    rig = threaded_rig
    rig.destinations.modes["slow"] = "hang"
    rig.core.engine.settings = replace(rig.core.engine.settings, chunk_rows=2,
                                       send_deadline_ms=30_000)
    ids = rig.add("slow", 10)
    rig.core.deliver(rig.claim())
    wait_until(lambda: "send slow" in rig.destinations.events, timeout_s=5,
               what="a send in flight")
    before = {t.ident for t in threading.enumerate()}
    closer = threading.Thread(target=rig.core.close)
    closer.start()
    time.sleep(0.3)
    assert closer.is_alive(), "close waits for the send in flight"
    assert not any(e.startswith("close") for e in rig.destinations.events)
    rig.destinations.release.set()
    closer.join(10)
    assert not closer.is_alive()
    events = rig.destinations.events
    assert events.index("close slow") > max(i for i, e in enumerate(events) if e == "sent slow")
    assert not [t for t in engine_threads() if t.ident in before], "every thread joined"
    statuses = rig.status(ids)
    sent = len(rig.destinations.got["slow"])
    assert statuses.count(Status.DELIVERED) == sent >= 2
    assert statuses.count(Status.PENDING) == 10 - sent, "the rest handed back, none CLAIMED"
    assert rig.store.channel_holds() == [], "its busy hold ended"


def test_one_loop_decides_for_every_destination_and_no_hold_outlives_its_work(
        threaded_rig: Rig) -> None:
    """Bug: a destination's hold was decided under its room lock by the submitting task and
    by the lane's threads at once (a hold written after the lane emptied stood with nothing
    to end it). Every decision is now the engine loop's: submits from four threads at once,
    each plan made on the loop's thread, and once the work is done no hold stands."""
    import tocsin.dispatcher.engine as engine_module

    rig = threaded_rig
    deciders: set[str] = set()
    plan = engine_module.plan

    def recording_plan(*args: object, **kwargs: object) -> object:
        deciders.add(threading.current_thread().name)
        return plan(*args, **kwargs)  # type: ignore[arg-type]

    engine_module.plan = recording_plan  # type: ignore[assignment]
    try:
        ids = rig.add("up", 200)
        batches = [rig.claim(limit=10) for _ in range(20)]
        submitters = [threading.Thread(target=lambda b=batches[i::4]: [rig.core.deliver(x)
                                                                        for x in b])
                      for i in range(4)]
        for t in submitters:
            t.start()
        for t in submitters:
            t.join(10)
        wait_until(lambda: rig.status(ids) == [Status.DELIVERED] * 200, timeout_s=20,
                   what="every row delivered")
        assert rig.core.engine.drain(10)
        wait_until(lambda: rig.store.channel_holds() == [], timeout_s=5,
                   what="no hold left once the destination is empty")
        assert deciders == {"tocsin-engine"}
        assert sorted(rig.destinations.got["up"]) == sorted(ids), "each once"
    finally:
        engine_module.plan = plan  # type: ignore[assignment]


def test_threads_do_not_grow_with_destinations(backend_url: str) -> None:
    """Two hundred destinations with work: the engine's threads stay the fixed set (the
    loop, the writer, the puller and the two pools), and none is left per destination."""
    names = [f"d{i}" for i in range(200)]
    rig = next(rigs := _rig(backend_url, threaded=True, names=names))
    try:
        ids = [i for name in names for i in rig.add(name, 2)]
        rig.core.deliver(rig.claim(limit=1000))
        wait_until(lambda: rig.status(ids) == [Status.DELIVERED] * len(ids), timeout_s=30,
                   what="every destination's rows")
        bound = 3 + SEND_THREADS + max(1, SEND_THREADS // 4)
        assert len(engine_threads()) <= bound
        assert rig.core.engine.drain(5)
        wait_until(lambda: rig.core.engine.info() == [], timeout_s=5,
                   what="idle destinations forgotten")
    finally:
        next(rigs, None)


def test_one_steps_sends_to_many_destinations_go_to_the_pool_as_one_job(
        backend_url: str) -> None:
    """Two hundred destinations with one row each, claimed at once, their asynchronous
    channels built: the chunks reach the send pool as one job per step of the loop, not one
    each, and start together; every row is delivered, and a destination whose send hangs
    holds none of the others."""
    names = [f"d{i}" for i in range(200)]
    workers = CountingWorkers(send_threads=SEND_THREADS)
    rig = next(rigs := _rig(backend_url, threaded=True, names=names, build=AsyncFakeChannel,
                            workers=workers, build_deadline_s=10))
    try:
        specs = [rig.core.channels.spec(name) for name in names]
        assert rig.core.channels.warm([s for s in specs if s is not None]) == {}
        rig.destinations.modes["d0"] = "hang"
        ids = [i for name in names for i in rig.add(name, 1)]
        rig.core.deliver(rig.claim(limit=1000))
        wait_until(lambda: rig.status(ids[1:]) == [Status.DELIVERED] * 199, timeout_s=30,
                   what="every destination's row but the hanging one's")
        assert rig.status(ids[:1]) == [Status.CLAIMED]
        assert workers.jobs <= 3, f"{workers.jobs} jobs for 200 chunks"
        rig.destinations.release.set()
        wait_until(lambda: rig.status(ids[:1]) == [Status.DELIVERED], timeout_s=10,
                   what="the hanging destination's row once it answers")
        assert sorted(i for got in rig.destinations.got.values() for i in got) == sorted(ids)
    finally:
        next(rigs, None)


def test_a_core_that_only_plans_or_records_batches_runs_no_engine_thread(
        backend_url: str) -> None:
    """Spark's driver-side source and sink runners make a core to plan and record batches:
    it starts no engine thread (and so pulls no backlog); the first delivery starts them."""
    before = len(engine_threads())
    store = open_store(backend_url, buckets=8)
    core = DispatchCore(store, options=DispatchOptions(store_url=backend_url, buckets=8),
                        clock=ManualClock(NOW), workers=ThreadedWorkers(send_threads=2))
    try:
        core.next_offset({"until": 0, "epoch": 0})
        assert len(engine_threads()) == before
        core.deliver([])
        assert len(engine_threads()) == before + 4  # the loop, the writer, the two pullers
    finally:
        core.close()
        store.close()
    assert len(engine_threads()) == before


def test_no_send_thread_waits_for_a_channels_build(backend_url: str) -> None:
    """More destinations whose channels take long to build than there are send threads: a
    destination whose channel is built still sends at once (the builds are awaited on the
    channel loop, not in the send pool), and the others send when their builds end."""
    opened = threading.Event()

    def build(spec: ChannelSpec, destinations: Destinations) -> Channel:
        if spec.name.startswith("b"):
            opened.wait(20)
        return FakeChannel(spec, destinations)

    names = ["up", *(f"b{i}" for i in range(2 * SEND_THREADS))]
    rig = next(rigs := _rig(backend_url, threaded=True, names=names, build=build,
                            build_deadline_s=30))
    try:
        rig.core.channels.warm([rig.core.channels.spec("up")])  # type: ignore[list-item]
        slow = [i for name in names[1:] for i in rig.add(name, 1)]
        rig.core.deliver(rig.claim())
        rig.clock.advance(1)
        up = rig.add("up", 1)
        rig.core.deliver(rig.claim())
        wait_until(lambda: rig.status(up) == [Status.DELIVERED], timeout_s=5,
                   what="the built destination's row while the others' builds hang")
        assert rig.status(slow) == [Status.CLAIMED] * len(slow)
        opened.set()
        wait_until(lambda: rig.status(slow) == [Status.DELIVERED] * len(slow), timeout_s=10,
                   what="the others' rows once their channels are built")
        assert {rig.store.get(i).attempts for i in slow} == {1}
    finally:
        opened.set()
        next(rigs, None)


def test_a_late_answer_past_the_deadline_is_never_taken_for_a_new_send(
        threaded_rig: Rig) -> None:
    """A send that hangs past its deadline is answered RETRY; when it returns at last, its
    answer only closes its old channel, even once the destination has new sends out."""
    rig = threaded_rig
    rig.destinations.modes["slow"] = "hang"
    [stuck] = rig.add("slow", 1)
    rig.core.deliver(rig.claim())
    wait_until(lambda: "send slow" in rig.destinations.events, timeout_s=5, what="the send")
    rig.clock.advance(300 + SEND_GRACE_MS)
    wait_until(lambda: rig.store.get(stuck).status is Status.PENDING, timeout_s=10,
               what="the deadline's RETRY")
    rig.destinations.modes["slow"] = "ok"
    rig.clock.advance(600_000)  # past any back-off; the old send still hangs
    again = rig.add("slow", 2)
    rig.core.deliver(rig.claim())
    wait_until(lambda: rig.status([stuck, *again]) == [Status.DELIVERED] * 3, timeout_s=10,
               what="the retried and the new rows delivered while the old send hangs")
    assert rig.core.engine.drain(5)  # all written: the destination is idle now
    rig.clock.advance(1_000)
    later = rig.add("slow", 2)
    rig.core.deliver(rig.claim())
    wait_until(lambda: rig.status(later) == [Status.DELIVERED] * 2, timeout_s=10,
               what="a later send while the old one still hangs")
    rig.destinations.release.set()  # the old send returns at last: its answer is dropped
    assert rig.core.engine.drain(5)
    assert rig.status([stuck, *again, *later]) == [Status.DELIVERED] * 5

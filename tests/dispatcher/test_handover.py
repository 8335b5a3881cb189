"""Hand-over windows (:mod:`tocsin.dispatcher.handover`), deterministically: a window of the
Spark-free core on a clock whose waits are jumps, with things happening at scripted instants
(a cancel, a create) — over every store. Each schedule is claimed at its due instant exactly,
a cancel before it wins, one after it loses, and the relay keeps to its zone."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from dataclasses import replace

import pytest

from tests.dispatcher.conftest import rig_over
from tocsin.abc import Store
from tocsin.clock import ManualClock
from tocsin.dispatcher.core import DispatchCore
from tocsin.dispatcher.handover import (
    POLL_MS,
    grid_shift_ms,
    hold,
    race_pause_until,
    relay_zone,
    released_only,
    window_end,
)
from tocsin.dispatcher.knobs import BACKSTOP_MS, LOOK_AHEAD, READER_LAG_MS, RELAY_ZONE_MS
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runs import RUN_STALE_MS
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.errors import ConflictError
from tocsin.testing.recording import Recordings

W = 2_000
T0 = 1_700_000_040_000  # a multiple of W
LEASE = 120_000


class ScriptedClock(ManualClock):
    """A manual clock whose waits jump, firing each scripted event at its instant on the way."""

    def __init__(self, start_ms: int) -> None:
        super().__init__(start_ms)
        self.events: list[tuple[int, Callable[[], None]]] = []
        self.waits = 0

    def at(self, ms: int, event: Callable[[], None]) -> None:
        self.events.append((ms, event))
        self.events.sort(key=lambda e: e[0])

    def sleep_until(self, ms: int) -> None:
        self.waits += 1
        while self.events and self.events[0][0] <= ms:
            when, event = self.events.pop(0)
            super().sleep_until(when)
            event()
        super().sleep_until(ms)


class Rig:
    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = ScriptedClock(T0)
        self.recordings = Recordings()
        options = DispatchOptions(store_url="", buckets=store.buckets, lease_ms=LEASE,
                                  partitions=1)
        self.local = LocalDispatcher(store, clock=self.clock, options=options,
                                     recordings=self.recordings, rng=random.Random(7))
        self.core: DispatchCore = self.local.dispatch
        self.core.options = replace(self.core.options, hand_over_ms=W)
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, config={}))

    def schedule(self, due_ms: int, **fields: object) -> str:
        made = self.store.create([NewSchedule(channel="out", payload=b"{}", due_ms=due_ms,
                                              **fields)],  # type: ignore[arg-type]
                                 now_ms=self.clock.now_ms())
        return made[0][0].id

    def got(self) -> list[str]:
        return [e.schedule_id for e in self.recordings.recorded("out")]

    def window(self, *, relay: bool = False) -> int:
        """Hold the one bucket range for a window opened now; how many it claimed."""
        shift = W // 2 if relay else 0
        end = window_end(self.clock.now_ms(), W, shift_ms=shift)
        return hold(self.core, 0, end_ms=end, relay=relay)[1]


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    with rig_over(backend_url, Rig) as rig:
        yield rig


def test_window_and_zone_arithmetic() -> None:
    assert window_end(T0, W) == T0 + W  # T0 + W/2 is on no grid
    assert window_end(T0 + 1, W) == T0 + W
    assert window_end(T0 + W // 2 + 1, W) == T0 + 2 * W  # never shorter than half a window
    assert window_end(T0 + 1, W, shift_ms=W // 2) == T0 + W // 2 + W  # relay: shifted half
    assert relay_zone(T0 + 10, W) == (T0, T0 + W // 2)
    assert relay_zone(T0 + W // 2, W) == (T0 + W, T0 + W + W // 2)
    assert released_only(T0) == T0 - 1  # claimed_ms < now - lease = 1: only released ones


def test_the_relays_zone_is_the_turn_not_half_of_a_long_window() -> None:
    long = 6_000  # more than two zones: the zone stays RELAY_ZONE_MS long
    assert relay_zone(T0 + 10, long) == (T0, T0 + RELAY_ZONE_MS)
    assert relay_zone(T0 + RELAY_ZONE_MS, long) == (T0 + long, T0 + long + RELAY_ZONE_MS)
    assert relay_zone(T0 + long // 2, long) == (T0 + long, T0 + long + RELAY_ZONE_MS)
    short = RELAY_ZONE_MS  # a window shorter than two zones: its first half
    assert relay_zone(T0 + 10, short) == (T0, T0 + short // 2)
    # a main window backing off in the zone waits no later than its end; past it, a poll
    assert race_pause_until(T0 + 10, 8, long, relay=False) == T0 + 10 + POLL_MS
    assert race_pause_until(T0 + RELAY_ZONE_MS - 10, 8, long, relay=False) == T0 + RELAY_ZONE_MS
    assert race_pause_until(T0 + RELAY_ZONE_MS + 10, 8, long,
                            relay=False) == T0 + RELAY_ZONE_MS + 10 + POLL_MS


def test_members_shift_their_grids_apart() -> None:
    assert [grid_shift_ms(slot, 2_000) for slot in range(6)] == [0, 1_000, 500, 1_500, 250,
                                                                 1_250]
    shift = grid_shift_ms(1, W)  # the second member: its windows end half a window later
    assert window_end(T0 + 1, W, shift_ms=shift) == T0 + W // 2 + W
    assert relay_zone(T0 + 10, W, shift_ms=shift) == (T0 + W // 2, T0 + W)
    assert relay_zone(T0 + W // 2 + 10, W, shift_ms=shift) == (T0 + W // 2, T0 + W)
    # a main window backing off inside its own relay's zone waits no later than its end
    at = T0 + W - POLL_MS // 2
    assert race_pause_until(at, 8, W, relay=False, shift_ms=shift) == T0 + W
    assert race_pause_until(at, 8, W, relay=False) == at + POLL_MS  # not the unshifted zone


def test_each_schedule_is_handed_over_at_its_due_instant(rig: Rig) -> None:
    ids = [rig.schedule(T0 + d) for d in (300, 750, 1_999)]
    late = rig.schedule(T0 + W + 1)  # after the window's end: the next window's
    assert rig.window() == 3
    assert rig.got() == ids
    for sid in ids:
        done = rig.store.get(sid)
        assert done.status is Status.DELIVERED and done.lateness_ms == 0
    assert rig.store.get(late).status is Status.PENDING
    assert rig.clock.now_ms() == T0 + W


def test_a_schedule_created_during_the_window_goes_out_on_time(rig: Rig) -> None:
    made: list[str] = []
    rig.clock.at(T0 + 500, lambda: made.append(rig.schedule(T0 + 500 + POLL_MS + 50)))
    assert rig.window() == 1
    assert rig.got() == made
    done = rig.store.get(made[0])
    assert done.lateness_ms == 0


def test_a_window_claims_the_instants_one_look_found_without_asking_again(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # Twenty due instants 5 ms apart (200 a second): a look before each claim took a window
    # on PostgreSQL longer than the 5 ms between two, and it fell behind.
    ids = [rig.schedule(T0 + 500 + 5 * i) for i in range(20)]
    looks: list[int] = []
    look = rig.store.claimable_times

    def counted(**kwargs: int | str) -> list[int]:
        looks.append(rig.clock.now_ms())
        return look(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.store, "claimable_times", counted)
    assert rig.window() == 20
    assert rig.got() == ids
    assert all(rig.store.get(sid).lateness_ms == 0 for sid in ids)
    # one look per LOOK_AHEAD instants, one when the last look is a poll old, and the one
    # after the last claim that finds nothing more (a look before each claim: 21)
    during = [t for t in looks if T0 + 500 <= t < T0 + 600]
    assert len(during) <= 20 // LOOK_AHEAD + 2, during


def test_a_window_looks_again_when_an_instant_it_was_told_of_went_away(rig: Rig) -> None:
    # The look at the window's start finds three instants; the first one's schedule is
    # cancelled and the second rescheduled before they fall due, and a new one is created
    # between them: each goes out at its own instant all the same.
    first, second, third = (rig.schedule(T0 + d) for d in (40, 60, 80))
    made: list[str] = []
    rig.clock.at(T0 + 10, lambda: rig.store.cancel(first, now_ms=rig.clock.now_ms()))
    rig.clock.at(T0 + 11, lambda: rig.store.reschedule(second, now_ms=rig.clock.now_ms(),
                                                       due_ms=T0 + 90))
    rig.clock.at(T0 + 12, lambda: made.append(rig.schedule(T0 + 50)))
    assert rig.window() == 3
    assert rig.got() == [*made, third, second]
    assert [rig.store.get(sid).lateness_ms for sid in (*made, third, second)] == [0, 0, 0]


def test_a_wait_that_ends_early_does_not_claim_before_the_instant(
        rig: Rig, monkeypatch: pytest.MonkeyPatch) -> None:
    # The engine ends a window's wait whenever a chunk finishes (a key's next head may be
    # claimable); a window that sent no keyed row claimed then, found nothing due, and backed
    # off as after a lost race: the row went out RACE_PAUSE_MS late.
    ids = [rig.schedule(T0 + 300 + 20 * i) for i in range(5)]
    pause, early = rig.core.pause_until, [0]

    def woken_early(ms: int) -> None:
        if ms - rig.clock.now_ms() > 1:  # a chunk finishes a millisecond before the instant
            early[0] += 1
            ms -= 1
        pause(ms)

    claims: list[int] = []
    claim = rig.store.claim

    def counted(**kwargs: object) -> object:
        claims.append(rig.clock.now_ms())
        return claim(**kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rig.core, "pause_until", woken_early)
    monkeypatch.setattr(rig.store, "claim", counted)
    assert rig.window() == 5
    assert early[0] >= 5
    assert claims == [T0 + 300 + 20 * i for i in range(5)]
    assert [rig.store.get(sid).lateness_ms for sid in ids] == [0] * 5


def test_a_cancel_before_the_hand_over_wins_and_one_after_it_loses(rig: Rig) -> None:
    early, late = rig.schedule(T0 + 800), rig.schedule(T0 + 1_200)
    refused: list[str] = []

    def cancel_after() -> None:
        try:
            rig.store.cancel(late, now_ms=rig.clock.now_ms())
        except ConflictError:
            refused.append(late)

    rig.clock.at(T0 + 799, lambda: rig.store.cancel(early, now_ms=rig.clock.now_ms()))
    rig.clock.at(T0 + 1_201, cancel_after)
    rig.window()
    assert rig.got() == [late]
    assert rig.store.get(early).status is Status.CANCELLED
    assert refused == [late] and rig.store.get(late).status is Status.DELIVERED


def test_a_window_reclaims_what_a_dead_run_released_never_a_live_lease(rig: Rig) -> None:
    sid = rig.schedule(T0 - LEASE * 3)
    old = T0 - LEASE * 2
    epoch = rig.store.next_epoch(run="gone", now_ms=old)
    # a dispatcher that was serving (ready: it owns every bucket) and then stopped beating
    rig.store.join_run("gone", now_ms=old, host="h", pid=1, stale_ms=RUN_STALE_MS)
    rig.store.beat_run("gone", now_ms=old, ready=True)
    rig.store.share_buckets(now_ms=old, stale_ms=RUN_STALE_MS)
    [row] = rig.store.claim(epoch=epoch, bucket_lo=0, bucket_hi=7, until_ms=old, now_ms=old,
                            lease_ms=LEASE, limit=10)
    assert row.id == sid
    assert rig.window() == 0  # its lease ended long ago, but a lease is the micro-batch's
    assert rig.store.get(sid).status is Status.CLAIMED
    assert rig.store.release_dead_runs(now_ms=rig.clock.now_ms(), stale_ms=RUN_STALE_MS) == 1
    assert rig.window() == 1
    assert rig.got() == [sid]
    [attempt] = rig.store.deliveries(sid)
    assert attempt.delivery_id == f"{sid}-1"  # the same attempt: the receiver can drop a repeat


def test_the_relay_hands_over_in_its_zone_and_what_nobody_took_outside_it(rig: Rig) -> None:
    rig.clock.set(T0 + 1_200)
    outside, inside = rig.schedule(T0 + 1_500), rig.schedule(T0 + W + 300)
    assert rig.window(relay=True) == 2  # window T0+1200 .. T0+3000, zone T0+2000 .. T0+3000
    assert rig.got() == [outside, inside]
    # due in the main windows' half of the period, and no main window took it: the relay
    # backs it up once it has waited BACKSTOP_MS (the next batch's window opened late)
    assert rig.store.get(outside).lateness_ms == BACKSTOP_MS
    assert rig.store.get(inside).lateness_ms == 0


def test_outside_its_zone_the_relay_leaves_a_schedule_to_the_main_window(rig: Rig) -> None:
    rig.clock.set(T0 + 1_200)
    taken = rig.schedule(T0 + 1_500)
    epoch = rig.store.next_epoch()

    def main_window() -> None:  # the main query's window takes it 20 ms after it fell due
        rig.store.claim(epoch=epoch, bucket_lo=0, bucket_hi=rig.store.buckets - 1,
                        until_ms=T0 + 1_520, now_ms=T0 + 1_520, lease_ms=LEASE, limit=10,
                        replay=False)

    rig.clock.at(T0 + 1_520, main_window)
    assert rig.window(relay=True) == 0
    assert rig.store.get(taken).status is Status.CLAIMED  # the main window's, not the relay's


def test_outside_its_zone_the_relay_leaves_a_backlog_to_the_batches(rig: Rig) -> None:
    rig.clock.set(T0 + 1_200)
    due = T0 + 1_200 - READER_LAG_MS - 300
    backlog = rig.schedule(due)
    assert rig.window(relay=True) == 1
    assert rig.got() == [backlog]
    assert rig.store.get(backlog).lateness_ms == T0 + W - due  # in its zone only


def test_a_window_that_lost_the_relays_zone_to_it_takes_over_when_the_zone_ends(
        rig: Rig) -> None:
    # a batch that started late: its window opens inside the relay's zone (T0 .. T0+1000),
    # where the relay takes every schedule at its due instant, before the window's claim
    rig.clock.set(T0 + 300)
    epoch = rig.store.next_epoch()
    for due in (*range(T0 + 400, T0 + 900, 100), T0 + 960):
        rig.schedule(due)

        def relay(at: int = due) -> None:
            rig.store.claim(epoch=epoch, bucket_lo=0, bucket_hi=rig.store.buckets - 1,
                            until_ms=at, now_ms=at, lease_ms=LEASE, limit=10, replay=False)

        rig.clock.at(due, relay)
    after = rig.schedule(T0 + 1_010)  # the relay's zone has ended: the window's
    assert rig.window() == 1
    assert rig.got() == [after]
    # six claims in a row that found nothing back the window off (a poll after the last one),
    # but not past the zone's end
    assert rig.store.get(after).lateness_ms == 0


def test_a_keyed_run_is_handed_over_in_order_in_one_window(rig: Rig) -> None:
    ids = [rig.schedule(T0 + 100, ordering_key="k") for _ in range(50)]
    assert rig.window() == 50
    assert rig.got() == ids


def test_an_idle_window_waits_by_polls_not_by_spinning(rig: Rig) -> None:
    assert rig.window() == 0
    assert rig.clock.waits <= W // POLL_MS + 1


def test_an_idle_dispatcher_runs_a_batch_to_keep_its_workers_warm(rig: Rig) -> None:
    core = rig.core
    core.options = replace(core.options, keep_warm_ms=30_000)
    start = {"until": 0, "epoch": 0}
    first = core.next_offset(start)
    assert first.get("warm") == 1  # a run's first batch, nothing due
    rig.clock.set(T0 + 29_999)
    assert core.next_offset(first) == first  # idle: no batch
    rig.clock.set(T0 + 30_000)
    kept = core.next_offset(first)
    assert kept != first and kept["epoch"] > first["epoch"]  # a minute's idleness never comes
    rig.clock.set(T0 + 31_000)
    assert core.next_offset(kept) == kept
    rig.schedule(T0 + 31_000 + W)  # due within a window: a batch, whose window will wait
    assert core.next_offset(kept) != kept


def test_a_batch_runs_while_the_runs_engines_hold_claims_so_spark_keeps_their_workers(
        rig: Rig) -> None:
    """An engine sends from a Spark worker that sits idle between tasks; a backlog it pulls
    itself is passed over by the batches. Without a batch now and then, Spark (and the session
    at rest) stopped that worker mid-send and its rows waited for the lease."""
    from tocsin.dispatcher.knobs import WORK_OUT_BATCH_MS
    from tocsin.domain import Ack, Outcome
    from tocsin.ids import delivery_id

    core, store = rig.core, rig.store
    core.options = replace(core.options, run="r1")
    store.join_run("r1", now_ms=T0, host="h", pid=1, stale_ms=RUN_STALE_MS)
    store.beat_run("r1", now_ms=T0, ready=True)
    store.share_buckets(now_ms=T0, stale_ms=RUN_STALE_MS, me="r1")
    sid = rig.schedule(T0 - 1)
    first = core.next_offset({"until": 0, "epoch": 0})  # the warm-up batch
    [row] = store.claim(epoch=first["epoch"], bucket_lo=0, bucket_hi=store.buckets - 1,
                        until_ms=T0, now_ms=T0, lease_ms=LEASE, limit=10)
    assert store.next_due_ms(now_ms=T0, lease_ms=LEASE, run="r1") == T0 + LEASE  # its lease
    rig.clock.set(T0 + WORK_OUT_BATCH_MS - 1)
    assert core.next_offset(first) == first
    rig.clock.set(T0 + WORK_OUT_BATCH_MS)
    kept = core.next_offset(first)
    assert kept != first  # the engine's row is still out: a batch, nothing due
    now = T0 + WORK_OUT_BATCH_MS + 1
    store.acknowledge(epoch=first["epoch"], now_ms=now, acks=[Ack(
        sid, delivery_id(sid, row.attempt), row.attempt, Outcome.DELIVERED, None, now, now,
        row.due_ms, Status.DELIVERED)])
    for step in (2, 3):  # nothing out, nothing due: no batch however long it waits
        rig.clock.set(T0 + step * WORK_OUT_BATCH_MS)
        assert core.next_offset(kept) == kept


def test_a_token_released_during_the_window_lets_the_next_go_within_a_poll(rig: Rig) -> None:
    """A policy with two tokens and five schedules due: two go at their due instant; each
    token a consumer releases lets one more go within a poll, in the same window — not one
    refill per micro-batch."""
    from tocsin.domain import Policy

    rig.store.put_policy(Policy(name="p", max_in_flight=2, token_lease_ms=60_000), now_ms=T0)
    ids = [rig.schedule(T0 + 100 + i, policy="p") for i in range(5)]
    released: dict[int, str] = {}

    def release_first() -> None:
        first = rig.recordings.recorded("out")[len(released)]
        assert rig.store.release(first.delivery_id, now_ms=rig.clock.now_ms())
        released[rig.clock.now_ms()] = first.schedule_id

    rig.clock.at(T0 + 700, release_first)
    rig.clock.at(T0 + 1_300, release_first)
    assert rig.window() == 4
    assert rig.got() == ids[:4]  # the policy's earliest first
    ends = {e.schedule_id: rig.store.get(e.schedule_id).delivered_ms
            for e in rig.recordings.recorded("out")}
    assert (ends[ids[0]], ends[ids[1]]) == (T0 + 100, T0 + 101)  # each at its due instant
    assert T0 + 700 < ends[ids[2]] <= T0 + 700 + POLL_MS
    assert T0 + 1_300 < ends[ids[3]] <= T0 + 1_300 + POLL_MS
    assert rig.store.get(ids[4]).status is Status.PENDING  # no token left
    assert rig.clock.waits <= 2 * W // POLL_MS  # a saturated policy is not polled in a spin


def test_one_task_of_a_batch_holds_every_bucket(rig: Rig) -> None:
    """The batch's first task holds a window over every bucket and the others none, and a
    schedule of any bucket goes out at its instant, on either store (SQLite takes one writer
    at a time; on PostgreSQL four windows side by side made each other late)."""
    core = rig.core
    core.options = replace(core.options, partitions=4)
    spans = [core.window_span(p) for p in range(4)]
    assert spans[0] is not None and (spans[0].lo, spans[0].hi) == (0, rig.store.buckets - 1)
    assert spans[1:] == [None, None, None]
    ids = [rig.schedule(T0 + 100 + i * 7) for i in range(12)]  # ids spread over buckets
    end = window_end(rig.clock.now_ms(), W)
    assert hold(core, 0, end_ms=end, span=spans[0])[1] == 12
    assert sorted(rig.got()) == sorted(ids)
    assert {rig.store.get(i).delivered_ms for i in ids} == {T0 + 100 + i * 7
                                                            for i in range(12)}


def test_a_batch_leaves_what_just_fell_due_to_its_windows(rig: Rig) -> None:
    """With windows, a micro-batch's own claim takes only what has waited READER_LAG_MS: a
    schedule due just before the batch is handed over by a window at once (the batch's rows
    reach the windows' process only through Spark), and a backlog still goes by the batch."""
    from tocsin.dispatcher.core import READER_LAG_MS

    core, now = rig.core, rig.clock.now_ms()
    backlog, fresh = rig.schedule(now - READER_LAG_MS - 5), rig.schedule(now - 5)
    [span] = core.parts({"until": 0, "epoch": 0}, {"until": now, "epoch": 7})
    assert span.until_ms == now - READER_LAG_MS
    assert [r.id for r in core.claim(span)] == [backlog]
    assert rig.window() == 1
    assert rig.store.get(fresh).status is Status.DELIVERED
    core.options = replace(core.options, hand_over_ms=0)  # no windows: the batch takes all
    [span] = core.parts({"until": 0, "epoch": 0}, {"until": now, "epoch": 8})
    assert span.until_ms == now

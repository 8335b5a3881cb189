"""The dispatcher's rules, deterministically: the Spark-free core stepped by
:class:`~tocsin.dispatcher.local.LocalDispatcher` on a :class:`~tocsin.clock.ManualClock`, over
every store. Time moves only when a test moves it, so "not yet" is checked at the instant
before, and "never" by steps that find nothing to do — no sleeps. The Spark end-to-end tests
(test_dispatch, test_retry, test_ordering_e2e, test_recurring_e2e) run the same rules for real.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.dispatcher.conftest import rig_over
from tocsin.abc import ClaimedRow, Store
from tocsin.api.ui.figures import deliveries_by_outcome
from tocsin.clock import ManualClock
from tocsin.dispatcher.channel_cache import SPEC_TTL_MS
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runs import RUN_BEAT_MS, RUN_STALE_MS
from tocsin.domain import (
    DEFAULT_TENANT,
    ChannelKind,
    ChannelSpec,
    CronTrigger,
    MisfirePolicy,
    NewSchedule,
    Outcome,
    Policy,
    Recurring,
    Schedule,
    Status,
)
from tocsin.testing.recording import Recordings

MIN = 60_000
T0 = 1_700_000_040_000 - 1_700_000_040_000 % MIN  # a whole minute
LEASE = 120_000
RETRY = {"retry_base_ms": 1_000, "retry_cap_ms": 8_000, "max_attempts": 4}


class Rig:
    """A store, a manual clock, a local dispatcher and the recordings of its channels."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.clock = ManualClock(T0)
        self.recordings = Recordings()
        self.local = self.restart()

    def restart(self) -> LocalDispatcher:
        """A fresh dispatcher on the same store (a process restart)."""
        options = DispatchOptions(store_url="", buckets=self.store.buckets, lease_ms=LEASE,
                                  horizon_ms=2 * MIN, **RETRY)
        self.local = LocalDispatcher(self.store, clock=self.clock, options=options,
                                     recordings=self.recordings, rng=random.Random(7))
        return self.local

    def channel(self, name: str, **config: Any) -> None:
        self.store.put_channel(ChannelSpec(name=name, kind=ChannelKind.RECORDING,
                                           config=config))

    def schedule(self, channel: str, *, in_ms: int = 0, n: int = 1, **fields: Any) -> list[str]:
        now = self.clock.now_ms()
        made = self.store.create([
            NewSchedule(channel=channel, payload=b'{"i":%d}' % i, due_ms=now + in_ms, **fields)
            for i in range(n)], now_ms=now)
        return [s.id for s, _ in made]

    def get(self, schedule_id: str) -> Schedule:
        return self.store.get(schedule_id)

    def got(self, channel: str) -> list[str]:
        """Ids of what ``channel`` accepted, in order."""
        return [e.schedule_id for e in self.recordings.recorded(channel)]

    def at(self, ms: int) -> None:
        self.clock.set(ms)


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    with rig_over(backend_url, Rig) as rig:
        yield rig


def test_a_schedule_goes_out_at_its_due_instant_not_before(rig: Rig) -> None:
    rig.channel("out")
    [sid] = rig.schedule("out", in_ms=5_000)
    rig.at(T0 + 4_999)
    assert rig.local.step().idle  # nothing claimable yet: no batch at all
    assert rig.got("out") == []
    rig.at(T0 + 5_000)
    step = rig.local.step()
    assert step.delivered.delivered == 1 and rig.got("out") == [sid]
    done = rig.get(sid)
    assert done.status is Status.DELIVERED and done.lateness_ms == 0
    assert rig.local.run_until_idle().delivered == 0  # delivered once, never again


def test_retries_back_off_then_deliver_with_one_delivery_id_per_attempt(rig: Rig) -> None:
    rig.channel("flaky", fail="retry", fail_first=2)
    [sid] = rig.schedule("flaky")
    gaps = []
    for attempt in (1, 2):
        assert rig.local.step().delivered.retried == 1
        s = rig.get(sid)
        assert (s.status, s.attempts) == (Status.PENDING, attempt)
        assert s.next_ms is not None
        gaps.append(s.next_ms - rig.clock.now_ms())
        rig.at(s.next_ms - 1)
        assert rig.local.step().idle  # not a millisecond early
        rig.at(s.next_ms)
    assert rig.local.step().delivered.delivered == 1
    # attempt n waits between half and all of min(cap, base * 2**(n-1))
    assert 500 <= gaps[0] <= 1_000 and 1_000 <= gaps[1] <= 2_000
    log = rig.store.deliveries(sid)
    assert [(d.attempt, d.outcome) for d in log] == [
        (1, Outcome.RETRY), (2, Outcome.RETRY), (3, Outcome.DELIVERED)]
    assert [d.delivery_id for d in log] == [f"{sid}-1", f"{sid}-2", f"{sid}-3"]
    assert rig.got("flaky") == [sid]


def test_exhausted_retries_and_refusals_die_into_the_dead_letter_channel(rig: Rig) -> None:
    rig.channel("dlq")
    rig.channel("down", fail="retry", max_attempts=2, dead_letter="dlq")
    rig.channel("refuses", fail="reject", dead_letter="dlq")
    [down] = rig.schedule("down")
    [refused] = rig.schedule("refuses")
    rig.local.step()
    assert rig.get(refused).status is Status.DEAD and rig.get(refused).attempts == 1
    assert rig.get(down).status is Status.PENDING
    rig.at(rig.get(down).next_ms or 0)
    rig.local.run_until_idle()
    dead = rig.get(down)
    assert (dead.status, dead.attempts) == (Status.DEAD, 2)
    assert "configured to retry" in (dead.last_error or "")
    letters = rig.recordings.recorded("dlq")
    assert sorted(e.payload for e in letters) == [b'{"i":0}', b'{"i":0}']
    assert {rig.get(e.schedule_id).channel for e in letters} == {"dlq"}
    assert rig.got("down") == [] and rig.got("refuses") == []


def test_a_channel_that_is_not_registered_kills_at_once(rig: Rig) -> None:
    [sid] = rig.schedule("nowhere")
    rig.local.step()
    gone = rig.get(sid)
    assert gone.status is Status.DEAD and "not registered" in (gone.last_error or "")


@pytest.mark.parametrize("on_dead", ["continue", "halt"])
def test_a_dead_head_continues_or_halts_its_key(rig: Rig, on_dead: str) -> None:
    rig.channel("refuses", fail="reject", on_dead=on_dead)
    rig.channel("keyed")
    [first] = rig.schedule("refuses", ordering_key="order-7")
    [second] = rig.schedule("keyed", ordering_key="order-7")
    [other] = rig.schedule("keyed", ordering_key="order-8")
    rig.local.run_until_idle()
    assert rig.get(first).status is Status.DEAD
    if on_dead == "continue":
        assert rig.got("keyed") == [other, second] or rig.got("keyed") == [second, other]
        assert rig.store.halted_keys() == []
        return
    assert rig.got("keyed") == [other]  # the rest of order-7 waits; other keys go on
    assert rig.get(second).status is Status.PENDING
    assert [k.ordering_key for k in rig.store.halted_keys()] == ["order-7"]
    rig.at(T0 + 10 * LEASE)
    assert rig.local.run_until_idle().delivered == 0  # halted stays halted, whatever the time
    rig.store.resume_key(tenant="default", ordering_key="order-7")
    rig.local.run_until_idle()
    assert rig.got("keyed") == [other, second]


def test_a_key_goes_in_order_one_at_a_time(rig: Rig) -> None:
    rig.channel("seq")
    ids = rig.schedule("seq", n=5, ordering_key="k")
    loose = rig.schedule("seq", n=3)
    first = rig.local.step()
    # the task delivers the key's due run head after head (each acknowledged before the next
    # is claimed), and every unordered one
    assert first.delivered.delivered == 5 + 3
    keyed = [i for i in rig.got("seq") if i in ids]
    assert keyed == ids and set(rig.got("seq")) == set(ids + loose)


def test_a_key_with_a_backlog_drains_in_order_in_few_batches(
        rig: Rig, say: Callable[[str], None]) -> None:
    rig.channel("seq")
    ids = rig.schedule("seq", n=500, ordering_key="hot")
    rig.local.run_until_idle()
    assert rig.got("seq") == ids
    assert {rig.get(i).status for i in ids} == {Status.DELIVERED}
    say(f"a key with 500 due schedules: {rig.local.batches} micro-batches")
    assert rig.local.batches < 50


def test_a_key_waits_for_its_retrying_head(rig: Rig) -> None:
    rig.channel("seq", fail="retry", fail_first=1)
    head, tail = rig.schedule("seq", n=2, ordering_key="k")
    rig.local.run_until_idle()
    assert rig.got("seq") == [] and rig.get(tail).status is Status.PENDING
    rig.at(rig.get(head).next_ms or 0)
    rig.local.run_until_idle()
    assert rig.got("seq") == [head, tail]


def test_throttling_holds_tokens_until_released_or_their_lease_ends(rig: Rig) -> None:
    rig.channel("th")
    rig.store.put_policy(Policy(name="p", max_in_flight=2, token_lease_ms=30_000),
                         now_ms=T0)
    ids = rig.schedule("th", n=5, policy="p")
    rig.local.run_until_idle()
    out = rig.got("th")
    assert len(out) == 2 and rig.store.in_flight("p", tenant=DEFAULT_TENANT, now_ms=T0) == 2
    assert rig.store.release(f"{out[0]}-1", now_ms=T0)
    rig.local.run_until_idle()
    assert len(rig.got("th")) == 3  # one token back, one more out
    rig.at(T0 + 29_999)
    assert rig.local.run_until_idle().delivered == 0
    rig.at(T0 + 30_000)  # the two unreleased tokens come back by themselves
    rig.local.run_until_idle()
    assert sorted(rig.got("th")) == sorted(ids)
    assert rig.got("th")[:2] == out


def test_a_rate_limit_spreads_starts_over_time(rig: Rig) -> None:
    rig.channel("rated")
    rig.store.put_policy(Policy(name="r", max_in_flight=100, rate=2.0), now_ms=T0)
    rig.schedule("rated", n=6, policy="r")
    rig.local.run_until_idle()
    assert len(rig.got("rated")) == 2  # a burst of one second's worth
    rig.at(T0 + 499)
    assert rig.local.run_until_idle().delivered == 0
    rig.at(T0 + 500)
    rig.local.run_until_idle()
    assert len(rig.got("rated")) == 3
    rig.at(T0 + 60_000)  # a long pause refills one second's worth, not more
    rig.local.run_until_idle()
    assert len(rig.got("rated")) == 5
    rig.at(T0 + 60_500)
    rig.local.run_until_idle()
    assert len(rig.got("rated")) == 6


def _claim_now(local: LocalDispatcher) -> list[ClaimedRow]:
    """One batch's claims by ``local``'s core, neither delivered nor acknowledged (a crash
    between the claim and the acknowledgement)."""
    core, start = local.dispatch, {"until": 0, "epoch": 0}
    end = core.next_offset(start)
    return [row for span in core.parts(start, end) for row in core.claim(span)]


def test_a_dead_runs_claims_go_out_once_its_beat_is_stale_with_the_same_delivery_ids(
        rig: Rig) -> None:
    rig.channel("out")
    ids = rig.schedule("out", n=3)
    claimed = _claim_now(rig.local)
    assert sorted(r.id for r in claimed) == sorted(ids)
    assert {r.attempt for r in claimed} == {1}
    rig.restart()  # the process died (kill -9) between the claim and the acknowledgement
    assert rig.local.run_until_idle().delivered == 0  # the dead run beat just now
    assert {rig.get(i).status for i in ids} == {Status.CLAIMED}
    rig.at(T0 + RUN_STALE_MS - 1)
    assert rig.local.run_until_idle().delivered == 0  # not yet: it may only be slow
    rig.at(T0 + RUN_STALE_MS + RUN_BEAT_MS)  # far sooner than the lease
    rig.local.run_until_idle()
    assert {rig.get(i).status for i in ids} == {Status.DELIVERED}
    # the lost attempt is repeated as itself: receivers drop the repeat by its delivery id
    assert sorted(e.delivery_id for e in rig.recordings.recorded("out")) == sorted(
        f"{i}-1" for i in ids)
    assert {d.attempt for i in ids for d in rig.store.deliveries(i)} == {1}


def test_a_claim_without_a_run_is_reclaimed_after_the_lease_with_the_same_delivery_id(
        rig: Rig) -> None:
    rig.channel("out")
    [sid] = rig.schedule("out")
    [row] = rig.store.claim(epoch=rig.store.next_epoch(), bucket_lo=0,
                            bucket_hi=rig.store.buckets - 1, until_ms=T0, now_ms=T0,
                            lease_ms=LEASE, limit=10)  # a claimant that never said its run
    rig.at(T0 + LEASE)
    assert rig.local.run_until_idle().delivered == 0
    rig.at(T0 + LEASE + 1)
    rig.local.run_until_idle()
    assert [e.delivery_id for e in rig.recordings.recorded("out")] == [f"{sid}-{row.attempt}"]
    assert row.attempt == 1


def test_a_live_runs_claims_are_never_taken_by_another_run(rig: Rig) -> None:
    rig.channel("out")
    [sid] = rig.schedule("out")
    first = rig.local
    [row] = _claim_now(first)  # in flight in the first dispatcher: a long batch
    second = rig.restart()  # a second dispatcher on the same store (a double deploy)
    for at in range(T0, T0 + 5 * RUN_STALE_MS, RUN_BEAT_MS):
        rig.at(at)
        first.dispatch.watch_runs(at)  # the first run's own beat thread
        assert second.step().claimed == 0
    assert rig.get(sid).status is Status.CLAIMED
    assert first.dispatch.deliver([row]).delivered == 1  # its verdict still applies
    assert [e.delivery_id for e in rig.recordings.recorded("out")] == [f"{sid}-1"]
    assert rig.get(sid).status is Status.DELIVERED


def test_a_stale_epoch_cannot_acknowledge_a_reclaimed_row(rig: Rig) -> None:
    rig.channel("out")
    [sid] = rig.schedule("out")
    core = rig.local.dispatch
    start = {"until": 0, "epoch": 0}
    old = [row for span in core.parts(start, core.next_offset(start))
           for row in core.claim(span)]
    rig.at(T0 + LEASE + 1)
    rig.restart().run_until_idle()  # a newer epoch reclaims and delivers
    late = core.deliver(old)  # the old claim's verdict arrives after all
    assert (late.delivered, late.fenced) == (1, 1)
    done = rig.get(sid)
    assert done.status is Status.DELIVERED and done.claim_epoch != old[0].epoch


def _minutely(rid: str, misfire: MisfirePolicy) -> Recurring:
    return Recurring(id=rid, trigger=CronTrigger.parse("* * * * *", "UTC"), channel="tick",
                     payload=b"{}", misfire=misfire, misfire_grace_ms=MIN // 2)


@pytest.mark.parametrize(("misfire", "fired", "reasons"), [
    (MisfirePolicy.FIRE_ONCE, 1, {"misfire: coalesced"}),
    (MisfirePolicy.FIRE_ALL, 4, set()),
    (MisfirePolicy.SKIP, 0, {"misfire: skipped"}),
])
def test_firings_missed_while_down_follow_the_misfire_rule(
        rig: Rig, misfire: MisfirePolicy, fired: int, reasons: set[str]) -> None:
    rig.channel("tick")
    rig.store.create_recurring(_minutely("rec", misfire), now_ms=T0)
    rig.local.run_until_idle()  # expands the horizon: the next 2 minutes
    covered = {f.firing_ms for f in rig.store.recurring_firings("rec")}
    assert covered == {T0 + MIN, T0 + 2 * MIN}
    rig.at(T0 + 7 * MIN + 1_000)  # down for seven minutes
    rig.local.run_until_idle()
    records = {f.firing_ms: f for f in rig.store.recurring_firings("rec")}
    missed = [T0 + m * MIN for m in range(3, 7)]  # due more than the grace (30 s) ago
    assert sum(records[m].outcome == "expanded" for m in missed) == fired
    assert {records[m].reason for m in missed if records[m].outcome == "skipped"} == reasons
    assert records[T0 + 7 * MIN].outcome == "expanded"  # 1 s late: within the grace
    # the two expanded before the outage go out late, the fired misses now, and 7's on time
    assert len(rig.got("tick")) == 2 + fired + 1
    rig.at(T0 + 8 * MIN)
    rig.local.run_until_idle()
    assert len(rig.got("tick")) == 2 + fired + 2  # back on the minute


def test_a_paused_recurring_records_skips_and_sends_nothing(rig: Rig) -> None:
    rig.channel("tick")
    rig.store.create_recurring(
        Recurring(id="p", trigger=CronTrigger.parse("* * * * *", "UTC"), channel="tick",
                  payload=b"{}", paused=True), now_ms=T0)
    for minute in range(1, 4):
        rig.at(T0 + minute * MIN)
        rig.local.run_until_idle()
    assert rig.got("tick") == []
    assert {f.reason for f in rig.store.recurring_firings("p")} == {"paused"}


def test_the_batch_beats_carry_the_tallies(rig: Rig) -> None:
    rig.channel("out")
    rig.channel("bad", fail="reject")
    rig.schedule("out", n=3)
    rig.schedule("bad")
    rig.local.run_until_idle()
    beat = rig.store.last_beat("dispatcher")
    assert beat is not None and beat[0] == T0
    # running totals are the store's counters, added in each acknowledgement's transaction
    counts = deliveries_by_outcome(rig.store.counter_totals(), None)
    assert (counts["delivered"], counts["dead"]) == (3, 1)


def test_a_changed_channel_takes_effect_once_its_cached_spec_expires(rig: Rig) -> None:
    rig.channel("c", fail="reject")
    [first] = rig.schedule("c")
    rig.local.step()
    rig.channel("c")  # now it accepts
    [second] = rig.schedule("c")
    rig.local.step()  # the spec read a moment ago is still used
    rig.at(T0 + SPEC_TTL_MS)
    [third] = rig.schedule("c")
    rig.local.step()
    assert [rig.get(i).status for i in (first, second, third)] == [
        Status.DEAD, Status.DEAD, Status.DELIVERED]

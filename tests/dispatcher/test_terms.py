"""A schedule's delivery terms, deterministically on every store: expiry (``expires_at``,
``max_lateness``, a channel's default) and the retry policy (a channel's over the settings, a
schedule's over its channel's), through the delivery engine that production runs, stepped by
:class:`~tocsin.dispatcher.local.LocalDispatcher` on a manual clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dispatcher.conftest import rig_over
from tests.dispatcher.test_core import T0, Rig, _claim_now
from tocsin.api.ui.figures import deliveries_by_outcome
from tocsin.dispatcher.runs import RUN_BEAT_MS, RUN_STALE_MS
from tocsin.domain import CronTrigger, Outcome, Recurring, Status
from tocsin.domain.retry import RetryTerms
from tocsin.domain.terms import Terms

S = 1_000
MIN = 60 * S


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    with rig_over(backend_url, Rig) as rig:
        yield rig


def _expired_count(rig: Rig) -> int:
    return deliveries_by_outcome(rig.store.counter_totals(), None)["expired"]


def test_what_would_go_out_after_its_expires_at_expires_and_is_never_sent(rig: Rig) -> None:
    rig.channel("out")
    [late] = rig.schedule("out", in_ms=5 * S, terms=Terms(expires_ms=T0 + 10 * S))
    [fine] = rig.schedule("out", in_ms=5 * S, terms=Terms(expires_ms=T0 + 10 * S + 1))
    [plain] = rig.schedule("out", in_ms=5 * S)
    rig.at(T0 + 10 * S)  # the dispatcher was down from before the due time until now
    rig.local.run_until_idle()
    assert sorted(rig.got("out")) == sorted([fine, plain])  # one ms before its deadline: sent
    gone = rig.get(late)
    assert gone.status is Status.EXPIRED and gone.delivered_ms is None
    assert "expired" in (gone.last_error or "") and "deadline" in (gone.last_error or "")
    assert [d.outcome for d in rig.store.deliveries(late)] == [Outcome.EXPIRED]
    assert rig.store.counts()[Status.EXPIRED] == 1 and _expired_count(rig) == 1
    assert rig.local.run_until_idle().delivered == 0  # final: never tried again


def test_max_lateness_is_the_schedules_own_else_its_channels(rig: Rig) -> None:
    rig.channel("out", max_lateness=60)
    [channels] = rig.schedule("out")
    [own] = rig.schedule("out", terms=Terms(max_lateness_ms=120 * S))
    rig.channel("lax")
    [unbounded] = rig.schedule("lax")
    rig.at(T0 + 90 * S)
    rig.local.run_until_idle()
    assert rig.get(channels).status is Status.EXPIRED
    assert rig.got("out") == [own] and rig.got("lax") == [unbounded]


def test_a_row_claimed_before_an_outage_and_handed_over_after_it_is_never_sent(
        rig: Rig) -> None:
    rig.channel("out")
    [sid] = rig.schedule("out", terms=Terms(max_lateness_ms=3 * S))
    [row] = _claim_now(rig.local)  # claimed at its due instant ...
    assert row.id == sid and rig.get(sid).status is Status.CLAIMED
    rig.restart()  # ... and the process died (kill -9) before it sent it
    rig.at(T0 + RUN_STALE_MS + RUN_BEAT_MS)  # the next run takes the dead run's claim over
    rig.local.run_until_idle()
    assert rig.got("out") == []
    assert rig.get(sid).status is Status.EXPIRED
    assert [d.delivery_id for d in rig.store.deliveries(sid)] == [f"{sid}-1"]


def test_a_retry_that_would_go_out_after_the_deadline_expires_at_once(rig: Rig) -> None:
    rig.channel("down", fail="retry")
    retry = RetryTerms(base_ms=S, multiplier=2.0, jitter=0.0)
    [sid] = rig.schedule("down", terms=Terms(max_lateness_ms=2_500, retry=retry))
    rig.local.step()
    assert (rig.get(sid).status, rig.get(sid).next_ms) == (Status.PENDING, T0 + S)
    rig.at(T0 + S)
    rig.local.run_until_idle()  # the next retry would be at T0 + 3 s: past the deadline
    gone = rig.get(sid)
    assert (gone.status, gone.attempts) == (Status.EXPIRED, 2)
    assert "expired" in (gone.last_error or "") and "configured to retry" in (
        gone.last_error or "")
    assert [d.outcome for d in rig.store.deliveries(sid)] == [Outcome.RETRY, Outcome.RETRY]


def test_an_expired_schedule_is_re_driven_like_a_dead_one_and_sent(rig: Rig) -> None:
    rig.channel("out", max_lateness=1)
    [sid] = rig.schedule("out")
    rig.at(T0 + 5 * S)
    rig.local.run_until_idle()
    assert rig.get(sid).status is Status.EXPIRED
    again = rig.store.redrive(sid, now_ms=rig.clock.now_ms())
    assert again.status is Status.PENDING
    rig.local.run_until_idle()  # a re-drive is an operator's word: send it, however late
    assert rig.got("out") == [sid] and rig.get(sid).status is Status.DELIVERED
    assert [d.delivery_id for d in rig.store.deliveries(sid)] == [f"{sid}-1", f"{sid}-2"]


def _attempt_gaps(rig: Rig, sid: str) -> list[int]:
    """Step a failing schedule through its attempts, each at its retry instant; the waits."""
    gaps = []
    while True:
        rig.local.step()
        s = rig.get(sid)
        if s.status is not Status.PENDING:
            return gaps
        assert s.next_ms is not None
        gaps.append(s.next_ms - rig.clock.now_ms())
        rig.at(s.next_ms - 1)
        assert rig.local.step().idle  # not a millisecond early
        rig.at(s.next_ms)


def test_a_retry_policy_sets_each_attempts_time_within_its_jitter_bounds(rig: Rig) -> None:
    rig.channel("down", fail="retry",
                retry={"base": 2, "multiplier": 3, "cap": 30, "jitter": 0.25})
    [sid] = rig.schedule("down", terms=Terms(retry=RetryTerms(max_attempts=6)))
    gaps = _attempt_gaps(rig, sid)
    ceilings = [2_000, 6_000, 18_000, 30_000, 30_000]  # min(cap, base * 3**(n-1))
    assert len(gaps) == len(ceilings), gaps  # the schedule's 6 attempts, not the rig's 4
    for gap, ceiling in zip(gaps, ceilings, strict=True):
        assert ceiling * 0.75 <= gap <= ceiling, (gaps, ceilings)
    assert rig.get(sid).status is Status.DEAD and rig.get(sid).attempts == 6


def test_no_retry_goes_out_after_max_retry_duration_since_the_first_attempt(
        rig: Rig) -> None:
    rig.channel("down", fail="retry")
    retry = RetryTerms(base_ms=S, multiplier=2.0, jitter=0.0, max_duration_ms=5 * S,
                       max_attempts=20)
    [sid] = rig.schedule("down", terms=Terms(retry=retry))
    # attempts at T0, +1 s, +3 s; the next would be at +7 s, past T0 + 5 s
    assert _attempt_gaps(rig, sid) == [S, 2 * S]
    dead = rig.get(sid)
    assert (dead.status, dead.attempts) == (Status.DEAD, 3)
    assert "max_retry_duration" in (dead.last_error or "")


def test_a_recurring_schedules_firings_carry_its_terms_and_expire_when_late(rig: Rig) -> None:
    rig.channel("tick")
    terms = Terms(max_lateness_ms=10 * S, retry=RetryTerms(max_attempts=2))
    rig.store.create_recurring(
        Recurring(id="rec", trigger=CronTrigger.parse("* * * * *", "UTC"), channel="tick",
                  payload=b"{}", terms=terms), now_ms=T0)
    assert rig.store.get_recurring("rec").terms == terms  # stored and read back
    rig.local.run_until_idle()  # expands the next 2 minutes
    made = rig.store.list_schedules(channel="tick", limit=10)
    assert len(made) == 2 and {s.terms for s in made} == {terms}
    rig.at(T0 + MIN + 10 * S)  # the first firing 10 s late: expired; the second on time
    rig.local.run_until_idle()
    rig.at(T0 + 2 * MIN)
    rig.local.run_until_idle()
    statuses = sorted((s.due_ms, rig.get(s.id).status) for s in made)
    assert statuses == [(T0 + MIN, Status.EXPIRED), (T0 + 2 * MIN, Status.DELIVERED)]


def test_expired_schedules_are_re_driven_by_predicate_apart_from_dead_ones(rig: Rig) -> None:
    rig.channel("out", max_lateness=1)
    rig.channel("refuses", fail="reject")
    expired = rig.schedule("out", n=2)
    [dead] = rig.schedule("refuses")
    rig.at(T0 + 5 * S)
    rig.local.run_until_idle()
    assert [rig.get(i).status for i in (*expired, dead)] == [Status.EXPIRED] * 2 + [Status.DEAD]
    now = rig.clock.now_ms()
    assert rig.store.redrive_where(now_ms=now, status=Status.EXPIRED) == 2
    assert rig.get(dead).status is Status.DEAD
    rig.local.run_until_idle()
    assert sorted(rig.got("out")) == sorted(expired)

"""Interval rules (``every`` from an anchor) and jitter: golden firings across DST changes (an
interval is absolute time), and jitter drawn from the firing's id so every expansion agrees."""

from __future__ import annotations

import itertools
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest

from tocsin.clock import from_ms, to_ms
from tocsin.domain import IntervalTrigger, Recurring, expand
from tocsin.domain.interval import iso_duration
from tocsin.domain.recurring import jitter_of
from tocsin.errors import ValidationError

BERLIN = ZoneInfo("Europe/Berlin")


def ms(text: str) -> int:
    """An RFC 3339 instant as UTC milliseconds."""
    return to_ms(datetime.fromisoformat(text))


def local(t: int) -> str:
    """``t`` read on Berlin's wall clock."""
    return from_ms(t).astimezone(BERLIN).isoformat(timespec="minutes")


def test_hourly_across_spring_forward_keeps_its_rhythm_in_absolute_time() -> None:
    trigger = IntervalTrigger(every_ms=3_600_000, anchor_ms=ms("2026-03-28T23:00:00+00:00"),
                              timezone=BERLIN)
    got = trigger.next(ms("2026-03-28T22:59:59+00:00"), 4)
    assert [local(t) for t in got] == ["2026-03-29T00:00+01:00", "2026-03-29T01:00+01:00",
                                       "2026-03-29T03:00+02:00", "2026-03-29T04:00+02:00"]
    assert {b - a for a, b in itertools.pairwise(got)} == {3_600_000}


def test_daily_across_fall_back_moves_on_the_wall_clock() -> None:
    """P1D is 24 h: 09:00 CEST the day before the change is 08:00 CET the day after."""
    trigger = IntervalTrigger(every_ms=86_400_000, anchor_ms=ms("2026-10-24T07:00:00+00:00"))
    got = trigger.next(ms("2026-10-24T00:00:00+00:00"), 3)
    assert [local(t) for t in got] == ["2026-10-24T09:00+02:00", "2026-10-25T08:00+01:00",
                                       "2026-10-26T08:00+01:00"]


def test_firings_count_from_the_anchor_both_ways_within_start_and_end() -> None:
    anchor = ms("2026-01-01T00:00:00+00:00")
    trigger = IntervalTrigger(every_ms=90 * 60_000, anchor_ms=anchor,
                              start_ms=anchor - 3 * 5_400_000, end_ms=anchor + 2 * 5_400_000)
    assert list(trigger.firings(anchor - 10 * 5_400_000)) == [
        anchor + k * 5_400_000 for k in range(-3, 3)]
    assert trigger.expr == "every PT1H30M" and trigger.firings_per_minute == 1
    assert list(trigger.firings(anchor, anchor)) == []  # strictly after
    assert trigger.next(anchor + 2 * 5_400_000) == []


@pytest.mark.parametrize(("ms_", "text"), [(5_400_000, "PT1H30M"), (86_400_000, "P1D"),
                                           (90_061_500, "P1DT1H1M1.5S"), (1_000, "PT1S")])
def test_the_interval_reads_as_iso_8601(ms_: int, text: str) -> None:
    assert iso_duration(ms_) == text


def test_bad_intervals_name_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        IntervalTrigger(every_ms=500, anchor_ms=0)
    assert err.value.field == "every"
    with pytest.raises(ValidationError) as err:
        IntervalTrigger(every_ms=1000, anchor_ms=0, start_ms=10, end_ms=5)
    assert err.value.field == "end"


def _rule(jitter_ms: int, revision: int = 0) -> Recurring:
    return Recurring(id="rec-1", channel="out", payload=b"{}", jitter_ms=jitter_ms, count=2,
                     stagger_ms=1_000, revision=revision,
                     trigger=IntervalTrigger(every_ms=60_000, anchor_ms=0))


def test_jitter_is_drawn_from_the_firing_so_every_expansion_agrees() -> None:
    now = ms("2026-03-29T00:00:00+00:00")
    rule = _rule(30_000)
    whole = expand(rule, from_ms=now, now_ms=now, horizon_ms=3_600_000).firings
    halves = [*expand(rule, from_ms=now, now_ms=now, horizon_ms=1_800_000).firings,
              *expand(rule, from_ms=now + 1_800_000, now_ms=now + 1_800_000,
                      horizon_ms=1_800_000).firings]
    assert [(f.schedule_id, f.due_ms) for f in whole] == [(f.schedule_id, f.due_ms)
                                                           for f in halves]
    shifts = {f.firing_ms: f.due_ms - f.firing_ms for f in whole if f.index == 0}
    assert all(0 <= s <= 30_000 for s in shifts.values()) and len(set(shifts.values())) > 30
    # a firing's messages share its jitter (the stagger still spreads them)
    assert all(f.due_ms - f.firing_ms == shifts[f.firing_ms] + 500 * f.index for f in whole)
    assert [jitter_of(_rule(0), t) for t in shifts] == [0] * len(shifts)
    # golden: the same firing draws the same jitter in every process and release (SHA-256 of
    # the firing's id), so a replay or a kill -9 between expansions changes no due time
    assert [jitter_of(rule, now + k * 60_000) for k in range(3)] == [10679, 14770, 11605]
    assert [jitter_of(rule, now + k * 60_000) for k in range(3)] != \
        [jitter_of(_rule(30_000, revision=1), now + k * 60_000) for k in range(3)]


def test_jitter_is_bounded() -> None:
    with pytest.raises(ValidationError) as err:
        _rule(86_400_001)
    assert err.value.field == "jitter"

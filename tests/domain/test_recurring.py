"""Recurring expansion: deterministic ids, count and stagger, misfire policies, accounting."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tocsin.clock import ManualClock, to_ms
from tocsin.domain.cron import CronTrigger
from tocsin.domain.recurring import (
    Expansion,
    MisfirePolicy,
    Recurring,
    SkippedFiring,
    expand,
    firing_schedule_id,
)
from tocsin.errors import ValidationError

MINUTE = 60_000
NOON = to_ms(datetime.fromisoformat("2026-01-05T12:00:00Z"))


def every_minute(**overrides: Any) -> Recurring:
    """A recurring that fires every minute (UTC), with ``overrides`` applied."""
    base = Recurring(id="rec-1", trigger=CronTrigger.parse("* * * * *", "UTC"),
                     channel="jobs", payload=b'{"run":true}')
    return replace(base, **overrides)


def fired_at(expansion: Expansion) -> list[int]:
    """The distinct firing instants that fire, in order."""
    return sorted({f.firing_ms for f in expansion.firings})


@pytest.mark.parametrize(
    ("overrides", "field_name"),
    [({"count": 0}, "count"), ({"count": -3}, "count"), ({"stagger_ms": -1}, "stagger"),
     ({"misfire_grace_ms": -1}, "misfire_grace"), ({"id": ""}, "id"), ({"channel": ""}, "channel")],
)
def test_validation_names_the_field(overrides: dict[str, Any], field_name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        every_minute(**overrides)
    assert caught.value.field == field_name


def test_negative_horizon_is_refused() -> None:
    with pytest.raises(ValidationError) as caught:
        expand(every_minute(), from_ms=NOON, now_ms=NOON, horizon_ms=-1)
    assert caught.value.field == "horizon"


def test_ids_are_deterministic() -> None:
    recurring = every_minute(count=3)
    first = expand(recurring, from_ms=NOON, now_ms=NOON, horizon_ms=5 * MINUTE)
    again = expand(recurring, from_ms=NOON, now_ms=NOON, horizon_ms=5 * MINUTE)
    assert first == again
    ids = [f.schedule_id for f in first.firings]
    assert len(ids) == len(set(ids)) == 15
    assert ids[:3] == [f"rec-1:{NOON + MINUTE}:{i}" for i in range(3)]
    # A later, overlapping window names the shared firings the same way.
    later = expand(recurring, from_ms=NOON + 2 * MINUTE, now_ms=NOON + 2 * MINUTE,
                   horizon_ms=5 * MINUTE)
    shared = {f.schedule_id for f in first.firings} & {f.schedule_id for f in later.firings}
    assert shared == {firing_schedule_id("rec-1", NOON + m * MINUTE, i)
                      for m in (3, 4, 5) for i in range(3)}


def test_count_and_stagger_spread_messages_evenly() -> None:
    staggered = expand(every_minute(count=4, stagger_ms=20_000),
                       from_ms=NOON, now_ms=NOON, horizon_ms=MINUTE)
    at = NOON + MINUTE
    assert [(f.firing_ms, f.index, f.due_ms) for f in staggered.firings] == [
        (at, 0, at), (at, 1, at + 5_000), (at, 2, at + 10_000), (at, 3, at + 15_000)]
    together = expand(every_minute(count=3), from_ms=NOON, now_ms=NOON, horizon_ms=MINUTE)
    assert [(f.index, f.due_ms) for f in together.firings] == [(0, at), (1, at), (2, at)]


def downtime(policy: MisfirePolicy, **overrides: Any) -> tuple[Expansion, int]:
    """Expand at noon, stay down ten minutes past the window, expand again: (result, now)."""
    clock = ManualClock(start_ms=NOON)
    recurring = every_minute(misfire=policy, misfire_grace_ms=MINUTE, **overrides)
    first = expand(recurring, from_ms=clock.now_ms(), now_ms=clock.now_ms(), horizon_ms=MINUTE)
    assert fired_at(first) == [NOON + MINUTE]
    recurring = replace(recurring, expanded_until_ms=first.until_ms)
    clock.advance(11 * MINUTE + 30_000)  # down from 12:01:30 to 12:11:30
    assert recurring.expanded_until_ms is not None
    again = expand(recurring, from_ms=recurring.expanded_until_ms, now_ms=clock.now_ms(),
                   horizon_ms=MINUTE)
    assert again.until_ms == clock.now_ms() + MINUTE
    return again, clock.now_ms()


# In (12:01, 12:12:30]: 12:02..12:10 are missed (older than 12:11:30 - 1 min grace),
# 12:11 is late but within grace, 12:12 is ahead.
MISSED = [NOON + m * MINUTE for m in range(2, 11)]
ON_TIME = [NOON + 11 * MINUTE, NOON + 12 * MINUTE]


def test_fire_all_fires_every_missed_firing_now() -> None:
    result, now = downtime(MisfirePolicy.FIRE_ALL)
    assert [(f.firing_ms, f.due_ms) for f in result.firings] == [
        *((t, now) for t in MISSED), *((t, t) for t in ON_TIME)]
    assert result.skipped == []


def test_fire_once_coalesces_missed_firings_into_the_latest() -> None:
    result, now = downtime(MisfirePolicy.FIRE_ONCE)
    assert [(f.firing_ms, f.due_ms) for f in result.firings] == [
        (MISSED[-1], now), *((t, t) for t in ON_TIME)]
    assert result.skipped == [SkippedFiring(firing_ms=t, reason="misfire: coalesced")
                              for t in MISSED[:-1]]


def test_skip_records_every_missed_firing() -> None:
    result, _ = downtime(MisfirePolicy.SKIP)
    assert fired_at(result) == ON_TIME
    assert result.skipped == [SkippedFiring(firing_ms=t, reason="misfire: skipped")
                              for t in MISSED]


def test_a_late_firing_keeps_its_stagger_from_now() -> None:
    result, now = downtime(MisfirePolicy.FIRE_ONCE, count=2, stagger_ms=30_000)
    assert [(f.firing_ms, f.index, f.due_ms) for f in result.firings][:2] == [
        (MISSED[-1], 0, now), (MISSED[-1], 1, now + 15_000)]


def test_paused_skips_up_to_now_and_expands_nothing_ahead() -> None:
    result = expand(every_minute(paused=True), from_ms=NOON, now_ms=NOON + 3 * MINUTE,
                    horizon_ms=10 * MINUTE)
    assert result.firings == []
    assert result.skipped == [SkippedFiring(firing_ms=NOON + m * MINUTE, reason="paused")
                              for m in (1, 2, 3)]
    assert result.until_ms == NOON + 3 * MINUTE


EXPRS = ["* * * * *", "*/7 * * * *", "0 * * * *", "30 2 * * *", "*/15 1,2 * * *",
         "*/20 * * * * *"]


@settings(max_examples=200, deadline=None)
@given(
    expr=st.sampled_from(EXPRS),
    zone=st.sampled_from(["UTC", "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
    base=st.sampled_from(["2026-03-07T18:00Z", "2026-03-28T20:00Z", "2026-04-04T10:00Z",
                          "2026-10-03T10:00Z", "2026-10-24T20:00Z", "2026-10-31T22:00Z"]),
    from_offset=st.integers(0, 6 * 3_600_000),
    now_offset=st.integers(-3_600_000, 12 * 3_600_000),
    horizon=st.integers(0, 6 * 3_600_000),
    grace=st.integers(0, 3_600_000),
    policy=st.sampled_from(list(MisfirePolicy)),
    paused=st.booleans(),
    count=st.integers(1, 3),
    stagger=st.integers(0, 600_000),
)
def test_every_firing_is_accounted_for(
    expr: str, zone: str, base: str, from_offset: int, now_offset: int, horizon: int,
    grace: int, policy: MisfirePolicy, paused: bool, count: int, stagger: int,
) -> None:
    start = to_ms(datetime.fromisoformat(base))
    from_ms, now_ms = start + from_offset, start + from_offset + now_offset
    recurring = Recurring(id="r", trigger=CronTrigger.parse(expr, zone), channel="c",
                          payload=b"{}", count=count, stagger_ms=stagger, misfire=policy,
                          misfire_grace_ms=grace, paused=paused)
    result = expand(recurring, from_ms=from_ms, now_ms=now_ms, horizon_ms=horizon)
    assert result.until_ms == max(from_ms, now_ms + (0 if paused else horizon))
    window = list(recurring.trigger.firings(from_ms, result.until_ms))
    fired = fired_at(result)
    skipped = [s.firing_ms for s in result.skipped]
    assert sorted(fired + skipped) == window  # exactly once each: expanded or skipped
    assert len(result.firings) == len(fired) * count
    assert len({f.schedule_id for f in result.firings}) == len(result.firings)
    for f in result.firings:
        assert f.schedule_id == firing_schedule_id("r", f.firing_ms, f.index)
        assert 0 <= f.index < count
        late = f.firing_ms < now_ms - grace
        assert f.due_ms == (now_ms if late else f.firing_ms) + f.index * stagger // count
    assert all(s.reason.startswith("misfire: ") or s.reason == "paused" for s in result.skipped)


@settings(max_examples=50, deadline=None)
@given(steps=st.lists(st.integers(0, 20 * MINUTE), min_size=1, max_size=8),
       policy=st.sampled_from(list(MisfirePolicy)))
def test_chained_expansions_never_repeat_or_lose_a_firing(
    steps: list[int], policy: MisfirePolicy
) -> None:
    clock = ManualClock(start_ms=NOON)
    recurring = every_minute(misfire=policy, trigger=CronTrigger.parse("*/3 * * * *", "UTC"))
    seen: list[int] = []
    ids: list[str] = []
    until = NOON
    for step in steps:
        clock.advance(step)
        result = expand(recurring, from_ms=until, now_ms=clock.now_ms(), horizon_ms=5 * MINUTE)
        seen += fired_at(result) + [s.firing_ms for s in result.skipped]
        ids += [f.schedule_id for f in result.firings]
        until = result.until_ms
    assert sorted(seen) == list(recurring.trigger.firings(NOON, until))
    assert len(ids) == len(set(ids))

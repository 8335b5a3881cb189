"""Cron triggers: golden DST tables (worked out by hand), validation, seconds, bounds."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from itertools import pairwise
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tocsin.clock import from_ms, to_ms
from tocsin.domain.cron import CronTrigger
from tocsin.errors import ValidationError

BERLIN, NEW_YORK, LORD_HOWE = "Europe/Berlin", "America/New_York", "Australia/Lord_Howe"


def ms(iso: str) -> int:
    """An ISO instant with an offset (or Z) as UTC ms."""
    return to_ms(datetime.fromisoformat(iso))


# (zone, expr, after, until, [(local, utc), ...]): firings strictly after `after`, up to `until`.
# 2026 transitions: Berlin 29 Mar 02:00 CET -> 03:00 CEST and 25 Oct 03:00 CEST -> 02:00 CET
# (both at 01:00Z); New York 8 Mar 02:00 EST -> 03:00 EDT (07:00Z) and 1 Nov 02:00 EDT ->
# 01:00 EST (06:00Z); Lord Howe 5 Apr 02:00 +11:00 -> 01:30 +10:30 (4 Apr 15:00Z) and 4 Oct
# 02:00 +10:30 -> 02:30 +11:00 (3 Oct 15:30Z).
GOLDEN = [
    # Berlin, spring forward: 02:30 does not exist and moves to 03:00 CEST.
    (BERLIN, "30 2 * * *", "2026-03-28T00:00Z", "2026-03-30T23:00Z", [
        ("2026-03-28T02:30:00+01:00", "2026-03-28T01:30Z"),
        ("2026-03-29T03:00:00+02:00", "2026-03-29T01:00Z"),
        ("2026-03-30T02:30:00+02:00", "2026-03-30T00:30Z"),
    ]),
    (BERLIN, "0 * * * *", "2026-03-28T22:30Z", "2026-03-29T02:30Z", [
        ("2026-03-29T00:00:00+01:00", "2026-03-28T23:00Z"),
        ("2026-03-29T01:00:00+01:00", "2026-03-29T00:00Z"),
        ("2026-03-29T03:00:00+02:00", "2026-03-29T01:00Z"),
        ("2026-03-29T04:00:00+02:00", "2026-03-29T02:00Z"),
    ]),
    (BERLIN, "*/15 * * * *", "2026-03-29T00:30Z", "2026-03-29T01:30Z", [
        ("2026-03-29T01:45:00+01:00", "2026-03-29T00:45Z"),
        ("2026-03-29T03:00:00+02:00", "2026-03-29T01:00Z"),
        ("2026-03-29T03:15:00+02:00", "2026-03-29T01:15Z"),
        ("2026-03-29T03:30:00+02:00", "2026-03-29T01:30Z"),
    ]),
    # Berlin, fall back: 02:00-02:59 happens twice; the daily job fires at the first 02:30 only.
    (BERLIN, "30 2 * * *", "2026-10-24T00:00Z", "2026-10-26T23:00Z", [
        ("2026-10-24T02:30:00+02:00", "2026-10-24T00:30Z"),
        ("2026-10-25T02:30:00+02:00", "2026-10-25T00:30Z"),
        ("2026-10-26T02:30:00+01:00", "2026-10-26T01:30Z"),
    ]),
    (BERLIN, "0 * * * *", "2026-10-24T22:30Z", "2026-10-25T03:30Z", [
        ("2026-10-25T01:00:00+02:00", "2026-10-24T23:00Z"),
        ("2026-10-25T02:00:00+02:00", "2026-10-25T00:00Z"),
        ("2026-10-25T02:00:00+01:00", "2026-10-25T01:00Z"),
        ("2026-10-25T03:00:00+01:00", "2026-10-25T02:00Z"),
        ("2026-10-25T04:00:00+01:00", "2026-10-25T03:00Z"),
    ]),
    (BERLIN, "*/15 * * * *", "2026-10-25T00:30Z", "2026-10-25T01:30Z", [
        ("2026-10-25T02:45:00+02:00", "2026-10-25T00:45Z"),
        ("2026-10-25T02:00:00+01:00", "2026-10-25T01:00Z"),
        ("2026-10-25T02:15:00+01:00", "2026-10-25T01:15Z"),
        ("2026-10-25T02:30:00+01:00", "2026-10-25T01:30Z"),
    ]),
    # New York, spring forward.
    (NEW_YORK, "30 2 * * *", "2026-03-07T00:00Z", "2026-03-09T23:00Z", [
        ("2026-03-07T02:30:00-05:00", "2026-03-07T07:30Z"),
        ("2026-03-08T03:00:00-04:00", "2026-03-08T07:00Z"),
        ("2026-03-09T02:30:00-04:00", "2026-03-09T06:30Z"),
    ]),
    (NEW_YORK, "0 * * * *", "2026-03-08T04:30Z", "2026-03-08T09:30Z", [
        ("2026-03-08T00:00:00-05:00", "2026-03-08T05:00Z"),
        ("2026-03-08T01:00:00-05:00", "2026-03-08T06:00Z"),
        ("2026-03-08T03:00:00-04:00", "2026-03-08T07:00Z"),
        ("2026-03-08T04:00:00-04:00", "2026-03-08T08:00Z"),
        ("2026-03-08T05:00:00-04:00", "2026-03-08T09:00Z"),
    ]),
    (NEW_YORK, "*/15 * * * *", "2026-03-08T06:30Z", "2026-03-08T07:30Z", [
        ("2026-03-08T01:45:00-05:00", "2026-03-08T06:45Z"),
        ("2026-03-08T03:00:00-04:00", "2026-03-08T07:00Z"),
        ("2026-03-08T03:15:00-04:00", "2026-03-08T07:15Z"),
        ("2026-03-08T03:30:00-04:00", "2026-03-08T07:30Z"),
    ]),
    # New York, fall back: 01:00-01:59 repeats, so 02:30 is ordinary and 01:30 fires once.
    (NEW_YORK, "30 2 * * *", "2026-10-31T00:00Z", "2026-11-02T23:00Z", [
        ("2026-10-31T02:30:00-04:00", "2026-10-31T06:30Z"),
        ("2026-11-01T02:30:00-05:00", "2026-11-01T07:30Z"),
        ("2026-11-02T02:30:00-05:00", "2026-11-02T07:30Z"),
    ]),
    (NEW_YORK, "30 1 * * *", "2026-10-31T00:00Z", "2026-11-02T23:00Z", [
        ("2026-10-31T01:30:00-04:00", "2026-10-31T05:30Z"),
        ("2026-11-01T01:30:00-04:00", "2026-11-01T05:30Z"),
        ("2026-11-02T01:30:00-05:00", "2026-11-02T06:30Z"),
    ]),
    (NEW_YORK, "0 * * * *", "2026-11-01T03:30Z", "2026-11-01T08:30Z", [
        ("2026-11-01T00:00:00-04:00", "2026-11-01T04:00Z"),
        ("2026-11-01T01:00:00-04:00", "2026-11-01T05:00Z"),
        ("2026-11-01T01:00:00-05:00", "2026-11-01T06:00Z"),
        ("2026-11-01T02:00:00-05:00", "2026-11-01T07:00Z"),
        ("2026-11-01T03:00:00-05:00", "2026-11-01T08:00Z"),
    ]),
    (NEW_YORK, "*/15 * * * *", "2026-11-01T05:30Z", "2026-11-01T06:30Z", [
        ("2026-11-01T01:45:00-04:00", "2026-11-01T05:45Z"),
        ("2026-11-01T01:00:00-05:00", "2026-11-01T06:00Z"),
        ("2026-11-01T01:15:00-05:00", "2026-11-01T06:15Z"),
        ("2026-11-01T01:30:00-05:00", "2026-11-01T06:30Z"),
    ]),
    # Lord Howe, fall back by 30 minutes: 01:30-01:59 repeats.
    (LORD_HOWE, "30 2 * * *", "2026-04-03T00:00Z", "2026-04-05T23:00Z", [
        ("2026-04-04T02:30:00+11:00", "2026-04-03T15:30Z"),
        ("2026-04-05T02:30:00+10:30", "2026-04-04T16:00Z"),
        ("2026-04-06T02:30:00+10:30", "2026-04-05T16:00Z"),
    ]),
    (LORD_HOWE, "30 1 * * *", "2026-04-03T00:00Z", "2026-04-05T23:00Z", [
        ("2026-04-04T01:30:00+11:00", "2026-04-03T14:30Z"),
        ("2026-04-05T01:30:00+11:00", "2026-04-04T14:30Z"),
        ("2026-04-06T01:30:00+10:30", "2026-04-05T15:00Z"),
    ]),
    # 01:00 is not repeated; 90 minutes pass between 01:00 and 02:00.
    (LORD_HOWE, "0 * * * *", "2026-04-04T12:30Z", "2026-04-04T17:30Z", [
        ("2026-04-05T00:00:00+11:00", "2026-04-04T13:00Z"),
        ("2026-04-05T01:00:00+11:00", "2026-04-04T14:00Z"),
        ("2026-04-05T02:00:00+10:30", "2026-04-04T15:30Z"),
        ("2026-04-05T03:00:00+10:30", "2026-04-04T16:30Z"),
        ("2026-04-05T04:00:00+10:30", "2026-04-04T17:30Z"),
    ]),
    (LORD_HOWE, "*/15 * * * *", "2026-04-04T14:30Z", "2026-04-04T15:30Z", [
        ("2026-04-05T01:45:00+11:00", "2026-04-04T14:45Z"),
        ("2026-04-05T01:30:00+10:30", "2026-04-04T15:00Z"),
        ("2026-04-05T01:45:00+10:30", "2026-04-04T15:15Z"),
        ("2026-04-05T02:00:00+10:30", "2026-04-04T15:30Z"),
    ]),
    # Lord Howe, spring forward by 30 minutes: 02:00-02:29 does not exist; 02:30 does.
    (LORD_HOWE, "30 2 * * *", "2026-10-02T12:00Z", "2026-10-04T18:00Z", [
        ("2026-10-03T02:30:00+10:30", "2026-10-02T16:00Z"),
        ("2026-10-04T02:30:00+11:00", "2026-10-03T15:30Z"),
        ("2026-10-05T02:30:00+11:00", "2026-10-04T15:30Z"),
    ]),
    (LORD_HOWE, "15 2 * * *", "2026-10-02T12:00Z", "2026-10-04T18:00Z", [
        ("2026-10-03T02:15:00+10:30", "2026-10-02T15:45Z"),
        ("2026-10-04T02:30:00+11:00", "2026-10-03T15:30Z"),
        ("2026-10-05T02:15:00+11:00", "2026-10-04T15:15Z"),
    ]),
    (LORD_HOWE, "0 * * * *", "2026-10-03T12:30Z", "2026-10-03T17:30Z", [
        ("2026-10-04T00:00:00+10:30", "2026-10-03T13:30Z"),
        ("2026-10-04T01:00:00+10:30", "2026-10-03T14:30Z"),
        ("2026-10-04T03:00:00+11:00", "2026-10-03T16:00Z"),
        ("2026-10-04T04:00:00+11:00", "2026-10-03T17:00Z"),
    ]),
    (LORD_HOWE, "*/15 * * * *", "2026-10-03T15:00Z", "2026-10-03T16:00Z", [
        ("2026-10-04T01:45:00+10:30", "2026-10-03T15:15Z"),
        ("2026-10-04T02:30:00+11:00", "2026-10-03T15:30Z"),
        ("2026-10-04T02:45:00+11:00", "2026-10-03T15:45Z"),
        ("2026-10-04T03:00:00+11:00", "2026-10-03T16:00Z"),
    ]),
]


@pytest.mark.parametrize(
    ("zone", "expr", "after", "until", "expected"),
    GOLDEN,
    ids=[f"{z}|{e}|{a[:10]}" for z, e, a, _, _ in GOLDEN],
)
def test_golden_dst_table(
    zone: str, expr: str, after: str, until: str, expected: list[tuple[str, str]]
) -> None:
    for local, utc in expected:  # the table itself is consistent
        assert ms(local) == ms(utc)
    trigger = CronTrigger.parse(expr, zone)
    got = list(trigger.firings(ms(after), ms(until)))
    assert [from_ms(t).astimezone(ZoneInfo(zone)).isoformat() for t in got] == [
        local for local, _ in expected
    ]
    assert got == [ms(utc) for _, utc in expected]


@pytest.mark.parametrize(
    ("zone", "day"),
    [(BERLIN, "2026-03-29"), (BERLIN, "2026-10-25"),
     (NEW_YORK, "2026-03-08"), (NEW_YORK, "2026-11-01")],
)
@pytest.mark.parametrize(("expr", "step_ms"), [("0 * * * *", 3_600_000), ("*/15 * * * *", 900_000)])
def test_wildcard_rules_keep_their_rhythm(zone: str, day: str, expr: str, step_ms: int) -> None:
    start = ms(f"{day}T00:00Z") - 12 * 3_600_000
    got = list(CronTrigger.parse(expr, zone).firings(start - 1, start + 36 * 3_600_000))
    assert got == list(range(start, start + 36 * 3_600_000 + 1, step_ms))


WILDCARD_ORACLES: dict[str, Callable[[datetime], bool]] = {
    "0 * * * *": lambda local: local.minute == 0,
    "*/15 * * * *": lambda local: local.minute % 15 == 0,
    "*/20 */2 * * *": lambda local: local.minute % 20 == 0 and local.hour % 2 == 0,
    "*/10 1,2 * * *": lambda local: local.minute % 10 == 0 and local.hour in (1, 2),
}


@pytest.mark.parametrize("zone", [BERLIN, NEW_YORK, LORD_HOWE])
@pytest.mark.parametrize("expr", sorted(WILDCARD_ORACLES))
def test_wildcard_rules_fire_at_every_matching_real_minute(zone: str, expr: str) -> None:
    """Brute force: every real minute of the transition days whose local reading matches."""
    for day in {BERLIN: ("2026-03-29", "2026-10-25"), NEW_YORK: ("2026-03-08", "2026-11-01"),
                LORD_HOWE: ("2026-04-05", "2026-10-04")}[zone]:
        start, end = ms(f"{day}T00:00Z") - 86_400_000, ms(f"{day}T00:00Z") + 86_400_000
        expected = [t for t in range(start + 60_000, end + 1, 60_000)
                    if WILDCARD_ORACLES[expr](from_ms(t).astimezone(ZoneInfo(zone)))]
        assert list(CronTrigger.parse(expr, zone).firings(start, end)) == expected


@settings(max_examples=150, deadline=None)
@given(
    zone=st.sampled_from([BERLIN, NEW_YORK, LORD_HOWE]),
    expr=st.sampled_from(["30 2 * * *", "30 1 * * *", "0 * * * *", "*/15 * * * *",
                          "0,30 1,2 * * *", "*/20 */2 * * *", "10 */20 2 * * *"]),
    cuts=st.lists(st.integers(0, 3 * 86_400_000), min_size=3, max_size=3),
    base=st.sampled_from(["2026-03-07", "2026-03-28", "2026-04-03", "2026-10-02",
                          "2026-10-24", "2026-10-31"]),
)
def test_firings_resume_anywhere(
    zone: str, expr: str, cuts: list[int], base: str
) -> None:
    """Splitting a window at any instant (inside a fold too) neither loses nor repeats."""
    after, mid, until = (ms(f"{base}T00:00Z") + c for c in sorted(cuts))
    trigger = CronTrigger.parse(expr, zone)
    whole = list(trigger.firings(after, until))
    assert whole == list(trigger.firings(after, mid)) + list(trigger.firings(mid, until))
    assert all(after < t <= until for t in whole)
    assert whole == sorted(set(whole))


def test_resuming_inside_a_fold() -> None:
    fixed = CronTrigger.parse("30 1 * * *", NEW_YORK)
    # 01:45 EDT and 01:10 EST: the first 01:30 has passed, the repeat never fires.
    assert fixed.next(ms("2026-11-01T05:45Z")) == [ms("2026-11-02T06:30Z")]
    assert fixed.next(ms("2026-11-01T06:10Z")) == [ms("2026-11-02T06:30Z")]
    wild = CronTrigger.parse("*/15 * * * *", NEW_YORK)
    assert wild.next(ms("2026-11-01T05:50Z"), 2) == [ms("2026-11-01T06:00Z"),
                                                     ms("2026-11-01T06:15Z")]


@pytest.mark.parametrize(
    ("expr", "field_name"),
    [
        ("61 * * * *", "minute field '61': 61 is outside 0-59"),
        ("* 24 * * *", "hour field '24': 24 is outside 0-23"),
        ("* * 0 * *", "day-of-month field '0': 0 is outside 1-31"),
        ("* * * 13 *", "month field '13': 13 is outside 1-12"),
        ("* * * FOO *", "month field 'FOO': 'FOO' is not a number or a name"),
        ("* * * * 8", "day-of-week field '8': 8 is outside 0-7"),
        ("* * * * MON#6", "day-of-week field 'MON#6': '#6' must name the 1st to 5th"),
        ("60 * * * * *", "second field '60': 60 is outside 0-59"),
        ("*/0 * * * *", "minute field '*/0': step '0' must be a whole number of at least 1"),
        ("30-10 * * * *", "minute field '30-10': range 30-10 runs backwards"),
        ("1,,2 * * * *", "minute field '1,,2': '' is not a number"),
        ("0 0 31 2 *", "day-of-month field '31': no such day in month field '2'"),
        ("* * * *", "expected 5 fields"),
        ("* * * * * * *", "expected 5 fields"),
    ],
)
def test_invalid_expressions_name_the_field(expr: str, field_name: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CronTrigger.parse(expr, "UTC")
    assert caught.value.field == "cron"
    assert field_name in caught.value.reason


@pytest.mark.parametrize("zone", ["Mars/Olympus_Mons", "", "../../etc/passwd"])
def test_unknown_zone(zone: str) -> None:
    with pytest.raises(ValidationError) as caught:
        CronTrigger.parse("* * * * *", zone)
    assert caught.value.field == "timezone"


def test_zone_is_converted_once_and_expression_normalised() -> None:
    trigger = CronTrigger.parse("  30   2 * *  MON-FRI ", BERLIN)
    assert trigger.timezone == ZoneInfo(BERLIN)
    assert trigger.expr == "30 2 * * MON-FRI"
    assert trigger == CronTrigger.parse("30 2 * * MON-FRI", ZoneInfo(BERLIN))
    assert trigger.fixed_time
    assert not CronTrigger.parse("*/5 2 * * *", BERLIN).fixed_time


def test_seconds_field() -> None:
    every_20s = CronTrigger.parse("*/20 * * * * *", "UTC")
    after = ms("2026-01-05T12:00:00Z")
    assert every_20s.next(after, 4) == [after + 20_000, after + 40_000, after + 60_000,
                                        after + 80_000]
    assert every_20s.next(after + 20_500) == [after + 40_000]  # strictly after, in ms
    daily = CronTrigger.parse("15 30 2 * * *", BERLIN)
    assert not CronTrigger.parse("15 * 2 * * *", BERLIN).fixed_time
    # Six fields follow the same DST rules: once on the repeated 02:30, moved past the gap.
    assert list(daily.firings(ms("2026-10-24T00:00Z"), ms("2026-10-26T23:00Z"))) == [
        ms("2026-10-24T02:30:15+02:00"), ms("2026-10-25T02:30:15+02:00"),
        ms("2026-10-26T02:30:15+01:00"),
    ]
    assert list(daily.firings(ms("2026-03-28T00:00Z"), ms("2026-03-30T23:00Z"))) == [
        ms("2026-03-28T02:30:15+01:00"), ms("2026-03-29T03:00:00+02:00"),
        ms("2026-03-30T02:30:15+02:00"),
    ]


def test_bounds_and_window_edges() -> None:
    start, end = ms("2026-01-05T12:00Z"), ms("2026-01-05T12:05Z")
    trigger = CronTrigger.parse("* * * * *", "UTC", start_ms=start, end_ms=end)
    assert list(trigger.firings(0)) == list(range(start, end + 1, 60_000))
    assert list(trigger.firings(start, start + 120_000)) == [start + 60_000, start + 120_000]
    assert trigger.next(end) == []
    with pytest.raises(ValidationError) as caught:
        CronTrigger.parse("* * * * *", "UTC", start_ms=end, end_ms=start)
    assert caught.value.field == "end"


def test_a_year_of_firings_across_every_transition() -> None:
    """Every 3 hours, except 2.5 h and 3.5 h across Lord Howe's half-hour shifts."""
    trigger = CronTrigger.parse("0 */3 * * *", LORD_HOWE)
    start = ms("2026-01-01T00:00Z")
    got = list(trigger.firings(start, start + 366 * 86_400_000))
    gaps = [b - a for a, b in pairwise(got)]
    assert len(got) == 8 * 366
    assert sorted(set(gaps)) == [9_000_000, 10_800_000, 12_600_000]
    assert gaps.count(9_000_000) == gaps.count(12_600_000) == 1


def test_a_rule_bounded_to_less_than_a_minute_counts_only_its_firings() -> None:
    """The rate cap reads the firings a minute can hold: a one-off burst (start == end) of an
    every-second rule fires once, so 5 000 messages a firing is 5 000 a minute, not 300 000."""
    every_second = CronTrigger.parse("* * * * * *", "UTC")
    at = 1_900_000_000_000
    assert every_second.firings_per_minute == 60
    assert replace(every_second, start_ms=at, end_ms=at).firings_per_minute == 1
    assert replace(every_second, start_ms=at, end_ms=at + 10_000).firings_per_minute == 11
    assert replace(every_second, start_ms=at, end_ms=at + 3_600_000).firings_per_minute == 60

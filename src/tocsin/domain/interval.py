"""Interval triggers: a firing every fixed span of absolute time, counted from an anchor.

``every`` is an ISO 8601 duration of days, hours, minutes and seconds (``PT90M``,
``P1DT12H``); it is **absolute time**: ``P1D`` is 86 400 s, so across a change of a zone's
clocks a daily interval keeps its rhythm in UTC and its wall-clock reading moves by the shift
(a rule that fires at 09:00 local before spring-forward fires at 10:00 local after it). For a
fixed wall time, use a cron rule. Months and years have no fixed length and are refused.

Firings are ``anchor + k * every`` for every integer k (before the anchor too), within the
trigger's ``start`` and ``end``. Instants are integer UTC milliseconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from zoneinfo import ZoneInfo

from tocsin.errors import ValidationError

__all__ = ["MIN_EVERY_MS", "IntervalTrigger", "iso_duration"]

MIN_EVERY_MS = 1_000
"""The shortest interval: one second (the finest a cron rule fires too)."""
MAX_MS = 253_402_300_799_999
"""The last millisecond of year 9999: no firing lies beyond it."""


def iso_duration(ms: int) -> str:
    """``ms`` as the shortest ISO 8601 duration of days, hours, minutes, seconds
    (``PT1H30M``, ``P1D``, ``PT0.5S``)."""
    days, rest = divmod(ms, 86_400_000)
    hours, rest = divmod(rest, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = f"{rest / 1000:g}" if rest else ""
    time = "".join(f"{v}{u}" for v, u in ((hours, "H"), (minutes, "M")) if v) + (
        f"{seconds}S" if seconds else "")
    return "P" + (f"{days}D" if days else "") + (f"T{time}" if time else "") if ms else "PT0S"


@dataclass(frozen=True, kw_only=True, slots=True)
class IntervalTrigger:
    """Every ``every_ms`` from ``anchor_ms``, optionally bounded to ``[start_ms, end_ms]``."""

    every_ms: int
    anchor_ms: int
    start_ms: int | None = None
    """No firing before this instant."""
    end_ms: int | None = None
    """No firing after this instant."""
    timezone: ZoneInfo = field(default_factory=lambda: ZoneInfo("UTC"))
    """The zone its firings are shown in; it changes no firing (an interval is absolute)."""

    def __post_init__(self) -> None:
        if self.every_ms < MIN_EVERY_MS:
            raise ValidationError("every", f"must be at least {MIN_EVERY_MS // 1000} s, got "
                                           f"{self.every_ms} ms")
        if not 0 <= self.anchor_ms <= MAX_MS:
            raise ValidationError("anchor", "must lie between 1970 and year 9999")
        if self.start_ms is not None and self.end_ms is not None and self.end_ms < self.start_ms:
            raise ValidationError("end", "the trigger ends before it starts")

    @property
    def expr(self) -> str:
        """The rule as text: ``every PT1H30M``."""
        return f"every {self.every}"

    @property
    def every(self) -> str:
        """The interval as an ISO 8601 duration."""
        return iso_duration(self.every_ms)

    @property
    def firings_per_minute(self) -> int:
        """The most firings in any one minute."""
        return -(-60_000 // self.every_ms)

    def firings(self, after_ms: int, until_ms: int | None = None) -> Iterator[int]:
        """Firing instants strictly after ``after_ms`` and up to ``until_ms`` inclusive
        (unbounded when None: up to year 9999), in increasing order, within start and end."""
        if self.start_ms is not None:
            after_ms = max(after_ms, self.start_ms - 1)
        last = MAX_MS if until_ms is None else min(until_ms, MAX_MS)
        if self.end_ms is not None:
            last = min(last, self.end_ms)
        k = (after_ms - self.anchor_ms) // self.every_ms + 1  # the first firing after after_ms
        instant = self.anchor_ms + k * self.every_ms
        while instant <= last:
            yield instant
            instant += self.every_ms

    def next(self, after_ms: int, n: int = 1) -> list[int]:
        """The next ``n`` firings after ``after_ms`` (fewer if the trigger ends first)."""
        return list(islice(self.firings(after_ms), n))

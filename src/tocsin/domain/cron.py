"""Cron triggers: a cron rule read on the wall clock of one IANA time zone.

An expression has five fields (minute hour day-of-month month day-of-week) or six, with a
leading second field. Fields are matched by cronsim; what a wall-clock time means when the
zone's clocks change is decided here, the same way for five and six fields:

* A **fixed-time** rule is one whose minute and hour fields both name specific values (neither
  starts with ``*``: ``30 2 * * *``, ``0 9-17 * * MON-FRI``), as in Debian cron.

  - Clocks go back: a wall time that occurs twice fires **once**, at its first occurrence.
  - Clocks spring forward: a wall time that does not exist fires at the **first valid instant**
    after the gap (``30 2 * * *`` fires at 03:00 local on Berlin's spring-forward day); several
    missing times collapse into that one firing.

* Any other rule is a **wildcard** rule (``0 * * * *``, ``*/15 * * * *``, ``*/5 2 * * *``). It
  fires at every real instant whose wall-clock reading matches: a repeated wall time fires at
  both occurrences, a missing one never fires. Where the shift is a whole hour, hourly and step
  rules thus keep their rhythm in absolute time (every 3600 s, every 900 s) across both
  transitions. Lord Howe shifts by 30 minutes: ``*/15`` and ``*/30`` keep their rhythm there,
  but ``0 * * * *`` leaves a 90-minute gap on both days, because no instant reads 02:00 on the
  spring-forward day and 01:00 is not among the repeated times on the fall-back day.

The second field never changes the classification. Firings are integer UTC milliseconds.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from functools import cache
from itertools import islice
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError, available_timezones

from cronsim import CronSim

from tocsin.clock import from_ms, to_ms
from tocsin.domain.cronfields import check_fields
from tocsin.errors import ValidationError

__all__ = ["CronTrigger", "iana_zone"]

_DAY = timedelta(days=1)


@dataclass(frozen=True, kw_only=True, slots=True)
class CronTrigger:
    """A validated cron rule in a time zone, optionally bounded to ``[start_ms, end_ms]``.

    Build one with :meth:`parse` (which also accepts a zone name); the constructor validates too.
    """

    expr: str
    """The expression, fields separated by single spaces."""
    timezone: ZoneInfo
    start_ms: int | None = None
    """No firing before this instant."""
    end_ms: int | None = None
    """No firing after this instant."""
    fixed_time: bool = field(init=False, compare=False)
    """True for a fixed-time rule (see the module docstring for what that changes)."""

    def __post_init__(self) -> None:
        fields = check_fields(self.expr)
        object.__setattr__(self, "expr", " ".join(fields))
        minute, hour = fields[-5], fields[-4]
        object.__setattr__(
            self, "fixed_time", not minute.startswith("*") and not hour.startswith("*")
        )
        if not isinstance(self.timezone, ZoneInfo) or not self.timezone.key:
            raise ValidationError("timezone", "must be an IANA time zone such as Europe/Berlin")
        if self.start_ms is not None and self.end_ms is not None and self.end_ms < self.start_ms:
            raise ValidationError("end", "the trigger ends before it starts")

    @classmethod
    def parse(
        cls,
        expr: str,
        timezone: str | ZoneInfo = "UTC",
        *,
        start_ms: int | None = None,
        end_ms: int | None = None,
    ) -> CronTrigger:
        """Validate ``expr`` and the zone (a name or a ZoneInfo) into a trigger.

        Raises :class:`~tocsin.errors.ValidationError` on field ``cron`` naming the bad cron
        field and why, or on field ``timezone`` for an unknown zone.
        """
        if isinstance(timezone, str):
            timezone = _zone(timezone)
        return cls(expr=expr, timezone=timezone, start_ms=start_ms, end_ms=end_ms)

    @property
    def firings_per_minute(self) -> int:
        """The most firings in any one minute: the values of the second field (1 for a rule
        of five fields, which fires at second 0), or fewer when the trigger's start and end
        leave it less than a minute (a one-off burst: ``start == end`` fires once)."""
        most = len(CronSim(self.expr, datetime(2000, 1, 1, tzinfo=UTC)).seconds)
        if self.start_ms is not None and self.end_ms is not None \
                and self.end_ms - self.start_ms < 60_000:
            window = self.firings(self.start_ms - 1, self.end_ms)
            return min(most, sum(1 for _ in zip(range(most), window, strict=False)))
        return most

    def firings(self, after_ms: int, until_ms: int | None = None) -> Iterator[int]:
        """Firing instants (UTC ms) strictly after ``after_ms`` and up to ``until_ms`` inclusive
        (unbounded when None), in increasing order, within the trigger's start and end. Time
        ends with year 9999 (what ``datetime`` can name): no firing lies beyond it."""
        if self.start_ms is not None:
            after_ms = max(after_ms, self.start_ms - 1)
        if self.end_ms is not None:
            until_ms = self.end_ms if until_ms is None else min(until_ms, self.end_ms)
        last = after_ms
        instants = self._instants(after_ms)
        while True:
            try:
                instant = next(instants)
            except (StopIteration, OverflowError, ValueError):  # the last two: past year 9999
                return
            if until_ms is not None and instant > until_ms:
                return
            if instant > last:
                last = instant
                yield instant

    def next(self, after_ms: int, n: int = 1) -> list[int]:
        """The next ``n`` firings after ``after_ms`` (fewer if the trigger ends first)."""
        return list(islice(self.firings(after_ms), n))

    def _instants(self, after_ms: int) -> Iterator[int]:
        """Real instants for each matching wall time, sorted; may start at or before after_ms."""
        zone = self.timezone
        after = from_ms(after_ms - after_ms % 1000)
        # Wall readings of instants after `after` are never below `after` plus the smaller
        # of its offset and the offset a day later: that covers a fold just ahead.
        offset = min(_offset(after, zone), _offset(after + _DAY, zone))
        wall_start = (after + offset).replace(tzinfo=None)
        pending: list[int] = []
        for wall in CronSim(self.expr, wall_start):
            first, second, real = _resolve(wall, zone)
            # Nothing later can come before `first`: release what waits up to it.
            while pending and pending[0] <= first:
                yield heapq.heappop(pending)
            if real or self.fixed_time:
                yield first
            if second is not None and not self.fixed_time:
                heapq.heappush(pending, second)
        yield from sorted(pending)


@cache
def _iana_names() -> frozenset[str]:
    # "localtime" is this machine's zone file, not an IANA name.
    return frozenset(available_timezones() - {"localtime"})


def iana_zone(name: str) -> ZoneInfo:
    """The zone named ``name`` if it is an IANA zone name; :class:`ValidationError` on
    ``timezone`` for anything else (a region such as ``Europe``, a path, a made-up name).
    The edge asks this of new rules; a stored rule's zone is only loaded."""
    if name not in _iana_names():
        raise ValidationError("timezone", f"unknown IANA time zone {name!r}; give a zone "
                                          "name such as Europe/Berlin or UTC")
    return _zone(name)


def _zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: "Europe" is a directory
        raise ValidationError("timezone", f"unknown IANA time zone {name!r}") from None


def _offset(instant: datetime, zone: ZoneInfo) -> timedelta:
    """The zone's UTC offset at ``instant``."""
    return instant.astimezone(zone).utcoffset() or timedelta(0)


def _resolve(wall: datetime, zone: ZoneInfo) -> tuple[int, int | None, bool]:
    """What a naive wall time names in ``zone``: its first occurrence in UTC ms (for a missing
    time, the first valid instant after the gap), its second occurrence if it is repeated, and
    whether it exists at all."""
    early = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
    late = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
    if early.astimezone(zone).replace(tzinfo=None) == wall:
        return to_ms(early), (to_ms(late) if late != early else None), True
    # Missing: the gap's end lies in (late, early]; find it by bisection over whole seconds.
    low, high = to_ms(late) // 1000, to_ms(early) // 1000
    target = _offset(early, zone)
    while high - low > 1:
        mid = (low + high) // 2
        if _offset(from_ms(mid * 1000), zone) == target:
            high = mid
        else:
            low = mid
    return high * 1000, None, False

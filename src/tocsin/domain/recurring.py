"""Recurring schedules: a cron or interval trigger turned into concrete schedules, one window
at a time.

:func:`expand` is pure: given where the last expansion stopped and the clock's "now", it names
every firing up to ``now + horizon`` and what becomes of it. Each firing is created as ``count``
schedules whose ids derive from (recurring id, firing instant, index), so expanding the same
window twice yields the same ids and the store can refuse the repeats. A firing older than
``now - misfire_grace_ms`` was missed (Tocsin was down); the :class:`MisfirePolicy` decides
whether it still fires, re-based to ``now``, or is recorded as skipped with a reason.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from enum import StrEnum

from tocsin.domain.cron import CronTrigger
from tocsin.domain.interval import IntervalTrigger
from tocsin.domain.schedule import PayloadKind
from tocsin.domain.tenant import DEFAULT_TENANT
from tocsin.domain.terms import Terms
from tocsin.errors import ValidationError

__all__ = [
    "MAX_JITTER_MS",
    "Expansion",
    "Firing",
    "FiringOutcome",
    "MisfirePolicy",
    "Recurring",
    "SkipReason",
    "SkippedFiring",
    "expand",
    "firing_schedule_id",
    "jitter_of",
]


class FiringOutcome(StrEnum):
    """What became of one firing of a recurring schedule."""

    EXPANDED = "expanded"
    """Its messages were scheduled."""
    SKIPPED = "skipped"
    """It did not fire (see :class:`SkipReason`)."""
    CANCELLED = "cancelled"
    """It was expanded, then its recurring schedule changed or was deleted."""


class SkipReason(StrEnum):
    """Why a firing was skipped."""

    PAUSED = "paused"
    """Its recurring schedule was paused at the firing."""
    MISFIRE_SKIPPED = "misfire: skipped"
    """Missed (beyond the grace window) under :attr:`MisfirePolicy.SKIP`."""
    MISFIRE_COALESCED = "misfire: coalesced"
    """Missed, and a later missed firing fired in its place (:attr:`MisfirePolicy.FIRE_ONCE`)."""
    PENDING_CAP = "pending cap"
    """Its tenant held its pending cap (``tenant_max_pending``) when the firing was expanded:
    its messages were not scheduled."""


class MisfirePolicy(StrEnum):
    """What to do with firings missed by more than the grace window (e.g. after downtime)."""

    FIRE_ONCE = "fire_once"
    """Coalesce: only the latest missed firing fires, at once; the others are skipped with
    reason ``misfire: coalesced``."""
    FIRE_ALL = "fire_all"
    """Catch up: every missed firing fires, at once."""
    SKIP = "skip"
    """Drop: every missed firing is skipped with reason ``misfire: skipped``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Recurring:
    """A recurring schedule: ``count`` messages to ``channel`` at every firing of ``trigger``."""

    id: str
    tenant: str = DEFAULT_TENANT
    trigger: CronTrigger | IntervalTrigger
    channel: str
    payload: bytes
    payload_kind: PayloadKind = PayloadKind.JSON
    headers: dict[str, str] = field(default_factory=dict)
    count: int = 1
    """Messages per firing (at least 1)."""
    stagger_ms: int = 0
    """The ``count`` messages are spread evenly over this window; 0 sends all at the firing."""
    labels: dict[str, str] = field(default_factory=dict)
    """Its labels, which its firings carry (:mod:`tocsin.domain.labels`)."""
    jitter_ms: int = 0
    """Each firing's messages are due up to this much later than the firing, by an amount
    drawn from the firing's id (:func:`jitter_of`): every expansion of one firing agrees."""
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    misfire_grace_ms: int = 60_000
    """A firing at most this late still fires as if on time; older ones are missed."""
    policy: str | None = None
    """The throttling policy its messages draw tokens from, if any."""
    paused: bool = False
    """While paused, firings are skipped with reason ``paused`` and nothing is expanded ahead."""
    expanded_until_ms: int | None = None
    """Firings up to this instant have been expanded (or skipped) already."""
    created_ms: int = 0
    updated_ms: int = 0
    next_expand_ms: int | None = None
    """When the expander next looks at it (None: no firing is left)."""
    revision: int = 0
    """Bumped by every change of the rule or the message: the firings it expands get ids of
    their own, so a changed recurring never collides with its cancelled older expansions."""
    failed_reason: str | None = None
    """Why its expansion failed, once it has (it is then no longer expanded until changed)."""
    failed_ms: int | None = None
    """When its expansion failed."""
    terms: Terms | None = None
    """Each firing's delivery terms (``max_lateness``, ``retry``; None: its channel's)."""

    def __post_init__(self) -> None:
        if not self.id:
            raise ValidationError("id", "must not be empty")
        if not self.channel:
            raise ValidationError("channel", "must not be empty")
        if self.count < 1:
            raise ValidationError("count", f"must be at least 1, got {self.count}")
        if self.stagger_ms < 0:
            raise ValidationError("stagger", f"must not be negative, got {self.stagger_ms} ms")
        if not 0 <= self.jitter_ms <= MAX_JITTER_MS:
            raise ValidationError("jitter", f"must be 0 to {MAX_JITTER_MS // 1000} s, got "
                                            f"{self.jitter_ms} ms")
        if self.misfire_grace_ms < 0:
            raise ValidationError(
                "misfire_grace", f"must not be negative, got {self.misfire_grace_ms} ms"
            )

    @property
    def messages_per_minute(self) -> int:
        """The most messages it makes in any one minute: firings a minute x ``count``."""
        return self.trigger.firings_per_minute * self.count

    def check_rate(self, limit: int) -> None:
        """:class:`ValidationError` on ``count`` naming the computed rate when it makes more
        than ``limit`` messages a minute."""
        if (rate := self.messages_per_minute) > limit:
            raise ValidationError("count", f"{self.trigger.firings_per_minute} firings a minute "
                                           f"x count {self.count} = {rate} messages a minute; "
                                           f"the limit is {limit} (setting "
                                           "recurring_max_per_minute)")

    def next_expand_ms_after(self, until_ms: int, *, now_ms: int, horizon_ms: int) -> int | None:
        """When to expand again after expanding up to ``until_ms`` at ``now_ms``: early enough
        that the next firing is expanded a full horizon ahead (at least half a horizon ahead
        when firings are frequent, so each expansion covers many); for a paused one, when its
        next firing passes (to record it skipped). None when no firing is left."""
        following = self.trigger.next(until_ms)
        if not following:
            return None
        if self.paused:
            return following[0]
        return max(following[0] - horizon_ms, now_ms + horizon_ms // 2)

    def offset_ms(self, index: int) -> int:
        """How long after its firing message ``index`` (0-based) is due."""
        return index * self.stagger_ms // self.count


@dataclass(frozen=True, kw_only=True, slots=True)
class Firing:
    """One message of one firing, ready to become a schedule."""

    recurring_id: str
    firing_ms: int
    """The trigger's firing instant (also for a missed firing that fires late)."""
    index: int
    """0 .. count-1 within the firing."""
    due_ms: int
    schedule_id: str
    """Deterministic: see :func:`firing_schedule_id`."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SkippedFiring:
    """A firing that will not fire, and why (``paused``, ``misfire: coalesced``, ...)."""

    firing_ms: int
    reason: SkipReason


@dataclass(frozen=True, kw_only=True, slots=True)
class Expansion:
    """The outcome of one :func:`expand`: every firing in ``(from_ms, until_ms]`` is in
    exactly one of ``firings`` (all its messages) or ``skipped``."""

    firings: list[Firing]
    skipped: list[SkippedFiring]
    until_ms: int
    """The new ``expanded_until_ms``: the next expansion starts after it."""


MAX_JITTER_MS = 86_400_000
"""The largest jitter: a day."""


def jitter_of(recurring: Recurring, firing_ms: int) -> int:
    """How much later than ``firing_ms`` the firing's messages are due: a number in
    ``[0, jitter_ms]`` drawn from the firing's id (the recurring, its revision and the firing
    instant) by SHA-256, so a replay, a re-expansion and every process agree."""
    if not recurring.jitter_ms:
        return 0
    firing = firing_schedule_id(recurring.id, firing_ms, 0, recurring.revision).rsplit(":", 1)[0]
    digest = hashlib.sha256(f"tocsin-jitter:{firing}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % (recurring.jitter_ms + 1)


def firing_schedule_id(recurring_id: str, firing_ms: int, index: int, revision: int = 0) -> str:
    """The schedule id of message ``index`` of the firing at ``firing_ms`` (of the recurring's
    ``revision``): the same every time it is expanded."""
    prefix = recurring_id if revision == 0 else f"{recurring_id}.r{revision}"
    return f"{prefix}:{firing_ms}:{index}"


def expand(recurring: Recurring, *, from_ms: int, now_ms: int, horizon_ms: int) -> Expansion:
    """The firings in ``(from_ms, now_ms + horizon_ms]``: on-time ones due at their firing
    (plus the stagger offset), missed ones handled by the misfire policy and, when they still
    fire, due at ``now_ms`` plus the offset. A paused recurring expands only up to ``now_ms``,
    skipping everything."""
    if horizon_ms < 0:
        raise ValidationError("horizon", f"must not be negative, got {horizon_ms} ms")
    if recurring.paused:
        until = max(from_ms, now_ms)
        paused = [SkippedFiring(firing_ms=t, reason=SkipReason.PAUSED)
                  for t in recurring.trigger.firings(from_ms, until)]
        return Expansion(firings=[], skipped=paused, until_ms=until)
    until = max(from_ms, now_ms + horizon_ms)
    times = list(recurring.trigger.firings(from_ms, until))
    cutoff = now_ms - recurring.misfire_grace_ms
    missed = [t for t in times if t < cutoff]
    on_time = times[len(missed):]
    skipped: list[SkippedFiring] = []
    late: list[int] = []
    if recurring.misfire is MisfirePolicy.FIRE_ALL:
        late = missed
    elif recurring.misfire is MisfirePolicy.FIRE_ONCE:
        late = missed[-1:]
        skipped = [SkippedFiring(firing_ms=t, reason=SkipReason.MISFIRE_COALESCED)
                   for t in missed[:-1]]
    else:
        skipped = [SkippedFiring(firing_ms=t, reason=SkipReason.MISFIRE_SKIPPED) for t in missed]
    firings = [*_messages(recurring, late, base_ms=now_ms),
               *_messages(recurring, on_time, base_ms=None)]
    return Expansion(firings=firings, skipped=skipped, until_ms=until)


def _messages(recurring: Recurring, times: list[int], *, base_ms: int | None) -> list[Firing]:
    """The ``count`` messages of each firing, due at the firing (or at ``base_ms``) + offset."""
    return [
        Firing(
            recurring_id=recurring.id,
            firing_ms=t,
            index=i,
            due_ms=(t if base_ms is None else base_ms) + jitter_of(recurring, t)
            + recurring.offset_ms(i),
            schedule_id=firing_schedule_id(recurring.id, t, i, recurring.revision),
        )
        for t in times
        for i in range(recurring.count)
    ]

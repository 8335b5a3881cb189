"""Firing a recurring rule by hand: **trigger** it now, or **backfill** a past range.

A trigger is one firing of its own, at the moment it is asked: the rule's ``count`` messages due
now (plus the stagger's offsets), their ids ``<rule>.trigger:<ms>:<index>``, accounted among
the rule's firings (``GET …/firings``) like any other. A backfill fires each firing of the rule
in ``[from, to)`` that the store holds no message of (one the expander skipped: a misfire, a
pause, the pending cap; or one before the rule existed), due now, with the ids
``<rule>.backfill:<firing ms>:<index>``. Its firings are written :data:`BACKFILL_CHUNK` at a
time, each chunk one transaction that looks first for what is there: a backfill killed half way
and run again fires the rest, and each firing is fired once. A range of more than the cap's
firings (``recurring_backfill_max``) is refused, naming how many it holds; ``to`` may not pass
the rule's expansion (those firings are the expander's)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import islice

from tocsin.abc import Store
from tocsin.clock import iso_ms
from tocsin.domain import NewSchedule, Recurring
from tocsin.errors import ValidationError

__all__ = ["BACKFILL_CHUNK", "Fired", "backfill", "backfill_firings", "trigger_now"]

BACKFILL_CHUNK = 100
"""Firings written per transaction by a backfill."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Fired:
    """What a trigger or a backfill did."""

    firings: int
    """Firings fired now."""
    messages: int
    """Their schedules."""
    already: int = 0
    """Firings of the range the store held messages of already (fired once, not again)."""
    firing_ms: int | None = None
    """A trigger's firing instant."""


def _messages(rule: Recurring, firings: Sequence[int], *, kind: str,
              now_ms: int) -> list[NewSchedule]:
    """The ``count`` messages of each firing fired by hand, due now plus each offset."""
    base = {**rule.headers, "Tocsin-Recurring-Id": rule.id, "Tocsin-Fired-By": kind}
    return [
        NewSchedule(
            id=f"{rule.id}.{kind}:{firing_ms}:{index}", channel=rule.channel,
            payload=rule.payload, payload_kind=rule.payload_kind,
            headers={**base, "Tocsin-Firing-At": iso_ms(firing_ms),
                     "Tocsin-Firing-Index": str(index)},
            due_ms=now_ms + rule.offset_ms(index), tenant=rule.tenant, policy=rule.policy,
            recurring_id=rule.id, firing_ms=firing_ms, terms=rule.terms,
            labels=rule.labels)
        for firing_ms in firings for index in range(rule.count)]


def trigger_now(store: Store, rule: Recurring, *, now_ms: int) -> Fired:
    """Fire ``rule`` once now (paused or not): a firing of its own at ``now_ms``."""
    fired = store.fire_recurring(rule, _messages(rule, [now_ms], kind="trigger", now_ms=now_ms),
                                 now_ms=now_ms, fresh_only=False)
    return Fired(firings=fired, messages=fired * rule.count, firing_ms=now_ms)


def backfill_firings(rule: Recurring, *, from_ms: int, to_ms: int, now_ms: int,
                     max_firings: int) -> list[int]:
    """The firings of ``rule`` in ``[from_ms, to_ms)`` a backfill may fire;
    :class:`ValidationError` naming ``from`` or ``to`` for a range it may not."""
    if from_ms >= to_ms:
        raise ValidationError("from", "must be before to")
    horizon = min(now_ms, rule.expanded_until_ms if rule.expanded_until_ms is not None
                  else rule.created_ms or now_ms)
    if to_ms > horizon + 1:
        raise ValidationError("to", f"must not be after {iso_ms(horizon)}: later firings are "
                                    "the expander's (a backfill fires past firings only)")
    firings = list(islice(rule.trigger.firings(from_ms - 1, to_ms - 1), max_firings + 1))
    if len(firings) > max_firings:
        raise ValidationError("to", f"the range holds more than {max_firings} firings, the "
                                    "most a backfill fires: backfill a shorter range")
    return firings


def backfill(store: Store, rule: Recurring, *, from_ms: int, to_ms: int, now_ms: int,
             max_firings: int) -> Fired:
    """Fire each firing of ``rule`` in ``[from_ms, to_ms)`` the store holds no message of,
    due now (:func:`backfill_firings` says which may be asked)."""
    firings = backfill_firings(rule, from_ms=from_ms, to_ms=to_ms, now_ms=now_ms,
                               max_firings=max_firings)
    fired = 0
    for start in range(0, len(firings), BACKFILL_CHUNK):
        chunk = firings[start:start + BACKFILL_CHUNK]
        fired += store.fire_recurring(
            rule, _messages(rule, chunk, kind="backfill", now_ms=now_ms), now_ms=now_ms,
            fresh_only=True)
    return Fired(firings=fired, messages=fired * rule.count, already=len(firings) - fired)

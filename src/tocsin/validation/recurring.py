"""A recurring rule as a request makes it: from the fields of ``POST /v1/recurring`` (and the
commands topic's ``recurring`` op), or a rule changed by those of ``PATCH``, every rule of
the rule checked (it fires, its firings fit in time, its rate and size are bounded). HTTP-free:
the API and the commands topic share it."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from tocsin.config import Settings
from tocsin.domain import CronTrigger, IntervalTrigger, MisfirePolicy, Recurring
from tocsin.domain.cron import iana_zone
from tocsin.domain.labels import check_labels
from tocsin.domain.terms import Terms
from tocsin.errors import ValidationError
from tocsin.validation.models import RecurringChange, RecurringIn
from tocsin.validation.parsing import (
    MAX_DUE_MS,
    check_message_size,
    parse_duration,
    parse_instant,
    payload_of,
)
from tocsin.validation.terms import terms_from

__all__ = ["changed_rule", "new_rule"]


def new_rule(body: RecurringIn, *, rule_id: str, tenant: str, settings: Settings,
             now_ms: int) -> Recurring:
    """The rule ``body`` asks for, as ``tenant``'s rule ``rule_id`` created at ``now_ms``;
    :class:`ValidationError` naming the field otherwise (its channel and policy are the
    caller's to look up)."""
    if payload_of(body, max_payload=settings.max_payload_bytes) is None:
        raise ValidationError("payload", "give exactly one of payload, payload_text, "
                                         "payload_base64 (got none)")
    if body.cron is None and body.every is None:
        raise ValidationError("cron", "give a cron rule, or every (an interval)")
    blank = Recurring(id=rule_id, tenant=tenant,
                      trigger=CronTrigger.parse("* * * * *", iana_zone(body.timezone)),
                      channel=body.channel, payload=b"null")
    return changed_rule(blank, body, settings=settings, now_ms=now_ms)


def _seconds_ms(value: float | str | None, field: str) -> int | None:
    return None if value is None else parse_duration(value, field) // timedelta(milliseconds=1)


def changed_rule(current: Recurring, body: RecurringChange, *, settings: Settings,
                 now_ms: int) -> Recurring:
    """``current`` with the fields ``body`` gives replaced, every rule checked again."""
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    if given & {"cron", "every", "anchor", "timezone", "start", "end"}:
        changes["trigger"] = _trigger(current.trigger, body, now_ms=now_ms)
    if (jitter := _seconds_ms(body.jitter, "jitter")) is not None:
        changes["jitter_ms"] = jitter
    payload = payload_of(body, max_payload=settings.max_payload_bytes)
    if payload is not None:
        changes["payload_kind"], changes["payload"] = payload
    if body.labels is not None:
        check_labels(body.labels)
        changes["labels"] = dict(body.labels)
    for name in ("channel", "headers", "count", "paused"):
        if name in given and getattr(body, name) is not None:
            changes[name] = getattr(body, name)
    if "policy" in given:
        changes["policy"] = body.policy
    if given & {"max_lateness", "retry"}:
        changes["terms"] = _terms(current.terms, body)
    if body.misfire is not None:
        changes["misfire"] = MisfirePolicy(body.misfire)
    if (stagger := _seconds_ms(body.stagger, "stagger")) is not None:
        changes["stagger_ms"] = stagger
    if (grace := _seconds_ms(body.misfire_grace, "misfire_grace")) is not None:
        changes["misfire_grace_ms"] = grace
    changed = dataclasses.replace(current, **changes)
    _check_rule(changed, settings=settings, now_ms=now_ms)
    return changed


def _terms(current: Terms | None, body: RecurringChange) -> Terms | None:
    """The firings' terms ``body`` makes of ``current`` (a field given as null clears it)."""
    given = body.model_fields_set
    made = terms_from(expires_at=None, max_lateness=body.max_lateness, retry=body.retry,
                      due_ms=None) or Terms()
    old = current or Terms()
    terms = Terms(
        max_lateness_ms=made.max_lateness_ms if "max_lateness" in given else old.max_lateness_ms,
        retry=made.retry if "retry" in given else old.retry)
    return None if terms.empty else terms


def _trigger(current: CronTrigger | IntervalTrigger, body: RecurringChange, *,
             now_ms: int) -> CronTrigger | IntervalTrigger:
    """The rule ``body`` makes of ``current``: a cron rule, or an interval when ``every`` is
    given (or ``current`` is one and ``cron`` is not given); unchanged parts kept."""
    given = body.model_fields_set
    if body.cron is not None and body.every is not None:
        raise ValidationError("every", "give cron or every, not both")
    start, end = current.start_ms, current.end_ms
    if "start" in given:
        start = parse_instant(body.start, "start") if body.start else None
    if "end" in given:
        end = parse_instant(body.end, "end") if body.end else None
    zone = iana_zone(body.timezone) if body.timezone is not None else current.timezone
    interval = body.every is not None or (isinstance(current, IntervalTrigger)
                                          and body.cron is None)
    if not interval:
        if body.anchor is not None:
            raise ValidationError("anchor", "is for an every rule, not a cron rule")
        expr = body.cron if body.cron is not None else current.expr
        return CronTrigger.parse(expr, zone, start_ms=start, end_ms=end)
    every_ms = _seconds_ms(body.every, "every") if body.every is not None else \
        current.every_ms  # type: ignore[union-attr]
    if body.anchor is not None:
        anchor = parse_instant(body.anchor, "anchor")
    elif isinstance(current, IntervalTrigger):
        anchor = current.anchor_ms
    else:
        anchor = start if start is not None else now_ms
    return IntervalTrigger(every_ms=every_ms or 0, anchor_ms=anchor, start_ms=start,
                           end_ms=end, timezone=zone)


def _check_rule(recurring: Recurring, *, settings: Settings, now_ms: int) -> None:
    """Refuse a rule that would flood the store with messages, or whose firings time cannot
    hold (the expander could never expand it)."""
    check_message_size(recurring.payload, recurring.headers,
                       limit=settings.max_payload_bytes)
    recurring.check_rate(settings.recurring_max_per_minute)
    trigger = recurring.trigger
    following = trigger.next(now_ms)
    if not following and (trigger.end_ms is None or trigger.end_ms >= now_ms):
        rule = "every" if isinstance(trigger, IntervalTrigger) else "cron"
        raise ValidationError("start" if trigger.start_ms is not None else rule,
                              "the rule never fires: its next firing would be after year 9999")
    if following and following[0] + recurring.stagger_ms + recurring.jitter_ms > MAX_DUE_MS:
        raise ValidationError("stagger", "the last message of the next firing would be due "
                                         "after year 9999")

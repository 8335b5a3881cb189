"""``/v1/recurring``: cron rules in a time zone, or intervals from an anchor, expanded into
schedules by the dispatcher."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps, registered
from tocsin.api.views import recurring_out
from tocsin.clock import from_ms, iso_ms
from tocsin.domain import CronTrigger, IntervalTrigger, MisfirePolicy, Recurring
from tocsin.domain.cron import iana_zone
from tocsin.errors import ValidationError
from tocsin.ids import new_schedule_id
from tocsin.validation.models import RecurringChange, RecurringIn
from tocsin.validation.parsing import (
    MAX_DUE_MS,
    check_message_size,
    parse_duration,
    parse_instant,
    payload_of,
)

__all__ = ["router"]

router = APIRouter(prefix="/v1/recurring", tags=["recurring"])


def _seconds_ms(value: float | str | None, field: str) -> int | None:
    return None if value is None else parse_duration(value, field) // timedelta(milliseconds=1)


def _checked(body: RecurringChange, deps: Deps, *, tenant: str) -> None:
    for kind, name in (("channel", body.channel), ("policy", body.policy)):
        if name is not None and not registered(deps.store, kind, name, tenant=tenant):
            raise ValidationError(kind, f"{kind} {name!r} is not registered")


def _apply(current: Recurring, body: RecurringChange, deps: Deps) -> Recurring:
    """``current`` with the fields ``body`` gives replaced, every rule checked again."""
    given = body.model_fields_set
    changes: dict[str, Any] = {}
    if given & {"cron", "every", "anchor", "timezone", "start", "end"}:
        changes["trigger"] = _trigger(current.trigger, body, now_ms=deps.clock.now_ms())
    if (jitter := _seconds_ms(body.jitter, "jitter")) is not None:
        changes["jitter_ms"] = jitter
    payload = payload_of(body, max_payload=deps.settings.max_payload_bytes)
    if payload is not None:
        changes["payload_kind"], changes["payload"] = payload
    for name in ("channel", "headers", "count", "paused"):
        if name in given and getattr(body, name) is not None:
            changes[name] = getattr(body, name)
    if "policy" in given:
        changes["policy"] = body.policy
    if body.misfire is not None:
        changes["misfire"] = MisfirePolicy(body.misfire)
    if (stagger := _seconds_ms(body.stagger, "stagger")) is not None:
        changes["stagger_ms"] = stagger
    if (grace := _seconds_ms(body.misfire_grace, "misfire_grace")) is not None:
        changes["misfire_grace_ms"] = grace
    changed = dataclasses.replace(current, **changes)
    _check_rule(changed, deps)
    return changed


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


def _check_rule(recurring: Recurring, deps: Deps) -> None:
    """Refuse a rule that would flood the store with messages, or whose firings time cannot
    hold (the expander could never expand it)."""
    check_message_size(recurring.payload, recurring.headers,
                       limit=deps.settings.max_payload_bytes)
    recurring.check_rate(deps.settings.recurring_max_per_minute)
    trigger = recurring.trigger
    now = deps.clock.now_ms()
    following = trigger.next(now)
    if not following and (trigger.end_ms is None or trigger.end_ms >= now):
        rule = "every" if isinstance(trigger, IntervalTrigger) else "cron"
        raise ValidationError("start" if trigger.start_ms is not None else rule,
                              "the rule never fires: its next firing would be after year 9999")
    if following and following[0] + recurring.stagger_ms + recurring.jitter_ms > MAX_DUE_MS:
        raise ValidationError("stagger", "the last message of the next firing would be due "
                                         "after year 9999")


@router.post("", status_code=201, summary="Create a recurring schedule")
def create(body: RecurringIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    tenant = tenant_for(request, body.tenant)
    _checked(body, deps, tenant=tenant)
    now = deps.clock.now_ms()
    if payload_of(body, max_payload=deps.settings.max_payload_bytes) is None:
        raise ValidationError("payload", "give exactly one of payload, payload_text, "
                                         "payload_base64 (got none)")
    if body.cron is None and body.every is None:
        raise ValidationError("cron", "give a cron rule, or every (an interval)")
    blank = Recurring(id=f"rec-{new_schedule_id(now)}", tenant=tenant,
                      trigger=CronTrigger.parse("* * * * *", iana_zone(body.timezone)),
                      channel=body.channel,
                      payload=b"null")
    recurring = _apply(blank, body, deps)
    with deps.quotas.holding(tenant):
        deps.quotas.admit_rule(deps.store, recurring)
        created = deps.store.create_recurring(recurring, now_ms=now)
    return recurring_out(created, now_ms=now)


@router.get("", summary="List recurring schedules (cursor pagination)")
def list_(request: Request,
          cursor: str | None = Query(None, description="The previous page's next_cursor."),
          limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
    deps = Deps.of(request)
    found = deps.store.list_recurring(tenant=scope(request), after_id=cursor,
                                      limit=limit + 1)
    page, now = found[:limit], deps.clock.now_ms()
    return {"items": [recurring_out(r, now_ms=now) for r in page],
            "next_cursor": page[-1].id if len(found) > limit else None}


@router.get("/{recurring_id}", summary="A recurring schedule")
def get(recurring_id: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    return recurring_out(deps.store.get_recurring(recurring_id, tenant=scope(request)),
                         now_ms=deps.clock.now_ms())


@router.patch("/{recurring_id}", summary="Change a recurring schedule: firings still ahead "
              "follow the new rule")
def patch(recurring_id: str, body: RecurringChange, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    current = deps.store.get_recurring(recurring_id, tenant=scope(request))
    _checked(body, deps, tenant=current.tenant)
    if not body.model_fields_set:
        raise ValidationError("body", "give at least one field to change")
    now = deps.clock.now_ms()
    changed = _apply(current, body, deps)
    with deps.quotas.holding(current.tenant):
        deps.quotas.admit_rule(deps.store, changed)
        updated = deps.store.update_recurring(changed, now_ms=now)
    return recurring_out(updated, now_ms=now)


def _set_paused(recurring_id: str, request: Request, paused: bool) -> dict[str, Any]:
    deps = Deps.of(request)
    now = deps.clock.now_ms()
    current = deps.store.get_recurring(recurring_id, tenant=scope(request))
    if current.paused != paused:
        changed = dataclasses.replace(current, paused=paused)
        with deps.quotas.holding(current.tenant):
            if not paused:  # a pause always passes; a resume counts again
                deps.quotas.admit_rule(deps.store, changed)
            current = deps.store.update_recurring(changed, now_ms=now)
    return recurring_out(current, now_ms=now)


@router.post("/{recurring_id}/pause", summary="Pause: firings are skipped until resumed")
def pause(recurring_id: str, request: Request) -> dict[str, Any]:
    return _set_paused(recurring_id, request, True)


@router.post("/{recurring_id}/resume", summary="Resume: firings after now fire again")
def resume(recurring_id: str, request: Request) -> dict[str, Any]:
    return _set_paused(recurring_id, request, False)


@router.delete("/{recurring_id}", status_code=204, summary="Delete; its firings still ahead "
               "are cancelled")
def delete(recurring_id: str, request: Request) -> Response:
    deps = Deps.of(request)
    deps.store.delete_recurring(recurring_id, now_ms=deps.clock.now_ms(),
                                tenant=scope(request))
    return Response(status_code=204)


@router.get("/{recurring_id}/next", summary="The next firings, in the zone and in UTC")
def next_(recurring_id: str, request: Request,
          n: int = Query(10, ge=1, le=1000)) -> dict[str, Any]:
    deps = Deps.of(request)
    recurring = deps.store.get_recurring(recurring_id, tenant=scope(request))
    zone = recurring.trigger.timezone
    times = recurring.trigger.next(deps.clock.now_ms(), n)
    return {"timezone": zone.key, "paused": recurring.paused, "items": [
        {"local": from_ms(t).astimezone(zone).isoformat(timespec="seconds"),
         "utc": iso_ms(t, "seconds")}
        for t in times]}


@router.get("/{recurring_id}/firings", summary="Every firing so far: expanded (its messages "
            "by status) or skipped, with the reason")
def firings(recurring_id: str, request: Request,
            after: str | None = Query(None, description="RFC 3339: firings after it."),
            limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
    deps = Deps.of(request)
    after_ms = parse_instant(after, "after") if after else -1
    from tocsin.api.views import iso

    records = deps.store.recurring_firings(recurring_id, tenant=scope(request),
                                           after_ms=after_ms, limit=limit)
    return {"items": [{"firing_at": iso(r.firing_ms), "outcome": r.outcome, "reason": r.reason,
                       "due_at": iso(r.due_ms), "messages": r.messages} for r in records]}

"""``/v1/recurring``: cron rules in a time zone, or intervals from an anchor, expanded into
schedules by the dispatcher."""

from __future__ import annotations

import dataclasses
from collections import Counter
from typing import Any

from fastapi import APIRouter, Query, Request, Response

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps, registered
from tocsin.api.views import recurring_out
from tocsin.clock import from_ms, iso_ms
from tocsin.domain import Recurring
from tocsin.errors import ValidationError
from tocsin.firing import Fired, backfill, backfill_firings, trigger_now
from tocsin.ids import new_schedule_id
from tocsin.validation.models import BackfillIn, RecurringChange, RecurringIn
from tocsin.validation.parsing import parse_instant
from tocsin.validation.recurring import changed_rule, new_rule

__all__ = ["RULE_ACTIONS", "act_on_rule", "fire_now", "router", "set_paused"]

router = APIRouter(prefix="/v1/recurring", tags=["recurring"])


def _checked(body: RecurringChange, deps: Deps, *, tenant: str) -> None:
    for kind, name in (("channel", body.channel), ("policy", body.policy)):
        if name is not None and not registered(deps.store, kind, name, tenant=tenant):
            raise ValidationError(kind, f"{kind} {name!r} is not registered")


@router.post("", status_code=201, summary="Create a recurring schedule")
def create(body: RecurringIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    tenant = tenant_for(request, body.tenant)
    _checked(body, deps, tenant=tenant)
    now = deps.clock.now_ms()
    recurring = new_rule(body, rule_id=f"rec-{new_schedule_id(now)}", tenant=tenant,
                         settings=deps.settings, now_ms=now)
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
    changed = changed_rule(current, body, settings=deps.settings, now_ms=now)
    with deps.quotas.holding(current.tenant):
        deps.quotas.admit_rule(deps.store, changed)
        updated = deps.store.update_recurring(changed, now_ms=now)
    return recurring_out(updated, now_ms=now)


RULE_ACTIONS = ("pause", "resume", "trigger", "cancel")
"""What :func:`act_on_rule` does to a rule (the dashboard's buttons): ``cancel`` deletes it,
cancelling its firings still ahead."""


def set_paused(deps: Deps, current: Recurring, paused: bool) -> Recurring:
    """``current`` paused or resumed (a resume counts against the rule caps again)."""
    if current.paused == paused:
        return current
    changed = dataclasses.replace(current, paused=paused)
    with deps.quotas.holding(current.tenant):
        if not paused:  # a pause always passes; a resume counts again
            deps.quotas.admit_rule(deps.store, changed)
        return deps.store.update_recurring(changed, now_ms=deps.clock.now_ms())


def fire_now(deps: Deps, rule: Recurring) -> Fired:
    """Trigger ``rule`` now, its messages counted against the tenant's caps."""
    now = deps.clock.now_ms()
    if deps.quotas.active:
        deps.quotas.admit(deps.store, Counter({rule.tenant: rule.count}), now_ms=now)
    return trigger_now(deps.store, rule, now_ms=now)


def act_on_rule(deps: Deps, rule: Recurring, action: str) -> None:
    """Do one of :data:`RULE_ACTIONS` to ``rule``; :class:`ValidationError` on ``action``
    for any other."""
    if action in ("pause", "resume"):
        set_paused(deps, rule, action == "pause")
    elif action == "trigger":
        fire_now(deps, rule)
    elif action == "cancel":
        deps.store.delete_recurring(rule.id, now_ms=deps.clock.now_ms(), tenant=rule.tenant)
    else:
        raise ValidationError("action", f"must be one of {', '.join(RULE_ACTIONS)}")


def _set_paused(recurring_id: str, request: Request, paused: bool) -> dict[str, Any]:
    deps = Deps.of(request)
    current = deps.store.get_recurring(recurring_id, tenant=scope(request))
    return recurring_out(set_paused(deps, current, paused), now_ms=deps.clock.now_ms())


@router.post("/{recurring_id}/pause", summary="Pause: firings are skipped until resumed")
def pause(recurring_id: str, request: Request) -> dict[str, Any]:
    return _set_paused(recurring_id, request, True)


@router.post("/{recurring_id}/resume", summary="Resume: firings after now fire again")
def resume(recurring_id: str, request: Request) -> dict[str, Any]:
    return _set_paused(recurring_id, request, False)


@router.post("/{recurring_id}/trigger", summary="Fire once now: a firing of its own, its "
             "messages due now (paused or not)")
def trigger(recurring_id: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    rule = deps.store.get_recurring(recurring_id, tenant=scope(request))
    fired = fire_now(deps, rule)
    now = fired.firing_ms or 0
    return {"id": rule.id, "firing_at": iso_ms(now), "firing_id": f"{rule.id}.trigger:{now}",
            "messages": fired.messages}


@router.post("/{recurring_id}/backfill", summary="Fire each missed firing of a past range "
             "once, due now (at most recurring_backfill_max firings)")
def backfill_(recurring_id: str, body: BackfillIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    rule = deps.store.get_recurring(recurring_id, tenant=scope(request))
    now = deps.clock.now_ms()
    start_ms, end_ms = parse_instant(body.from_, "from"), parse_instant(body.to, "to")
    cap = deps.settings.recurring_backfill_max
    firings = backfill_firings(rule, from_ms=start_ms, to_ms=end_ms, now_ms=now,
                               max_firings=cap)
    if deps.quotas.active:
        deps.quotas.admit(deps.store, Counter({rule.tenant: len(firings) * rule.count}),
                          now_ms=now)
    fired = backfill(deps.store, rule, from_ms=start_ms, to_ms=end_ms, now_ms=now,
                     max_firings=cap)
    return {"id": rule.id, "firings": fired.firings, "messages": fired.messages,
            "already": fired.already}


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

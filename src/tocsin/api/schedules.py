"""``/v1/schedules``: create (one or a batch, all or nothing), read, list, cancel."""

from __future__ import annotations

import dataclasses
from collections import Counter
from functools import partial
from typing import Any

from fastapi import APIRouter, Query, Request, Response
from pydantic.json_schema import models_json_schema
from starlette.concurrency import run_in_threadpool

from tocsin import tracing
from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.api.views import delivery_out, schedule_out
from tocsin.dispatcher.terms import retry_policy
from tocsin.domain import ChannelSpec, NewSchedule, RetryPolicy, Schedule, Status
from tocsin.domain.defaults import ms
from tocsin.domain.labels import parse_selector
from tocsin.errors import NotFoundError
from tocsin.tracing import trace_headers
from tocsin.validation.batch import read_schedules
from tocsin.validation.models import ScheduleBatchIn, ScheduleChange, ScheduleIn
from tocsin.validation.parsing import check_message_size, parse_instant
from tocsin.validation.schedule import read_change, registered

__all__ = ["openapi_schemas", "router"]

router = APIRouter(prefix="/v1/schedules", tags=["schedules"])

_BODY_DOC = {"requestBody": {"required": True, "content": {"application/json": {"schema": {
    "oneOf": [{"$ref": "#/components/schemas/ScheduleIn"},
              {"$ref": "#/components/schemas/ScheduleBatchIn"}]}}}}}


def openapi_schemas() -> dict[str, Any]:
    """The request schemas ``POST /v1/schedules`` refers to (it reads its body itself, to
    report every bad item of a batch), for the OpenAPI document's components."""
    _, schemas = models_json_schema([(ScheduleIn, "validation"), (ScheduleBatchIn, "validation")],
                                    ref_template="#/components/schemas/{model}")
    defs: dict[str, Any] = schemas["$defs"]
    return defs


@router.post("", status_code=201, openapi_extra=_BODY_DOC,
             responses={429: {"description": "A per-tenant cap is reached (Retry-After)"}},
             summary="Schedule one message, or a batch of up to 10 000 (all or nothing)")
async def create(request: Request, response: Response) -> dict[str, Any]:
    deps = Deps.of(request)
    items, batch = await run_in_threadpool(partial(
        read_schedules, await request.body(), settings=deps.settings, now_ms=deps.clock.now_ms(),
        known=partial(registered, deps.store), tenant_of=partial(tenant_for, request)))
    now = deps.clock.now_ms()
    context = trace_headers(request.headers)
    with tracing.span("tocsin.create", parent=context,
                      attributes={"tocsin.schedules": len(items)}):
        items = _traced(items, context)
        if deps.quotas.active:
            await run_in_threadpool(deps.quotas.admit, deps.store,
                                    Counter(s.tenant for s in items), now_ms=now)
        results = await run_in_threadpool(deps.store.create, items, now_ms=now)
    if not any(created for _, created in results):
        response.status_code = 200
    answers = [schedule_out(s, full=False) | {"created": created} for s, created in results]
    return {"schedules": answers} if batch else answers[0]


def _traced(items: list[NewSchedule], given: dict[str, str]) -> list[NewSchedule]:
    """``items``, each carrying the request's W3C trace context (``traceparent``,
    ``tracestate``) in its headers to its deliveries, unless it gives its own; with tracing
    on and no context given, the create span's."""
    context = dict(given)
    if not context:
        tracing.inject(context)
    if not context:
        return items
    return [item if any(k.lower() == "traceparent" for k in item.headers)
            else dataclasses.replace(item, headers={**item.headers, **context})
            for item in items]


@router.get("/{schedule_id}", summary="A schedule: status, attempts, last error, lateness")
def get(schedule_id: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    found = deps.store.get(schedule_id, tenant=scope(request))
    return schedule_out(found) | {"retry_policy": _retry_policy(deps, found).to_json()}


def _retry_policy(deps: Deps, s: Schedule) -> RetryPolicy:
    """The retry policy ``s``'s failures follow: its own ``retry`` over its channel's over the
    dispatcher's settings (as the dispatcher reads them)."""
    settings = deps.settings
    base = RetryPolicy(base_ms=ms(settings.retry_base_seconds),
                       cap_ms=ms(settings.retry_cap_seconds), max_attempts=settings.max_attempts)
    try:
        spec: ChannelSpec | None = deps.store.get_channel(s.channel, tenant=s.tenant)
    except NotFoundError:
        spec = None
    return retry_policy(base, spec, s.terms)


@router.get("", summary="List schedules (cursor pagination)")
def list_(
    request: Request,
    status: Status | None = None,
    channel: str | None = None,
    due_from: str | None = Query(None, description="RFC 3339; due at or after it."),
    due_to: str | None = Query(None, description="RFC 3339; due strictly before it."),
    key: str | None = Query(None, description="The idempotency key it was created with."),
    label: str | None = Query(None, max_length=1024, description="A label selector: "
                              "k=v[,k2=v2...], every pair must match."),
    cursor: str | None = Query(None, description="The previous page's next_cursor."),
    limit: int = Query(100, ge=1, le=1000),
) -> dict[str, Any]:
    """Schedules in id order; ``next_cursor`` is null on the last page."""
    found = Deps.of(request).store.list_schedules(
        status=status, channel=channel, key=key,
        due_from_ms=parse_instant(due_from, "due_from") if due_from else None,
        due_to_ms=parse_instant(due_to, "due_to") if due_to else None,
        after_id=cursor, limit=limit + 1, tenant=scope(request),
        labels=parse_selector(label))
    page = found[:limit]
    return {"items": [schedule_out(s) for s in page],
            "next_cursor": page[-1].id if len(found) > limit else None}


@router.get("/{schedule_id}/deliveries", summary="Every delivery attempt of a schedule")
def deliveries(schedule_id: str, request: Request) -> dict[str, Any]:
    store, tenant = Deps.of(request).store, scope(request)
    store.get(schedule_id, tenant=tenant)
    return {"items": [delivery_out(d) for d in store.deliveries(schedule_id, tenant=tenant)]}


@router.patch("/{schedule_id}", summary="Reschedule: new due time, payload or headers, "
              "while PENDING (409 with the status when too late)")
def reschedule(schedule_id: str, body: ScheduleChange, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    now = deps.clock.now_ms()
    change = read_change(body, settings=deps.settings, now_ms=now)
    if change.payload is not None or change.headers is not None:
        _check_size(deps, schedule_id, change.payload, change.headers, tenant=scope(request))
    return schedule_out(deps.store.reschedule(schedule_id, now_ms=now, tenant=scope(request),
                                              **change._asdict()))


def _check_size(deps: Deps, schedule_id: str, payload: bytes | None,
                headers: dict[str, str] | None, *, tenant: str | None) -> None:
    """Payload and headers after a PATCH, the half not given being the stored one (of
    ``tenant``'s schedule only), within the payload limit."""
    if payload is None or headers is None:
        current = deps.store.get(schedule_id, tenant=tenant)
        payload = current.payload if payload is None else payload
        headers = current.headers if headers is None else headers
    check_message_size(payload, headers, limit=deps.settings.max_payload_bytes)


@router.delete("/{schedule_id}", summary="Cancel: 200 = never delivered; 409 = too late")
def cancel(schedule_id: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    return schedule_out(deps.store.cancel(schedule_id, now_ms=deps.clock.now_ms(),
                                          tenant=scope(request)))

"""``/v1/schedules``: create (one or a batch, all or nothing), read, list, cancel."""

from __future__ import annotations

import json
from typing import Any

import pydantic
from fastapi import APIRouter, Query, Request, Response
from pydantic.json_schema import models_json_schema
from starlette.concurrency import run_in_threadpool

from tocsin.api.deps import Deps
from tocsin.api.models import (
    ScheduleBatchIn,
    ScheduleChange,
    ScheduleIn,
    due_of,
    iso,
    parse_instant,
    payload_of,
    schedule_out,
)
from tocsin.domain import NewSchedule, Status
from tocsin.errors import NotFoundError, ValidationError

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


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _load(body: bytes) -> Any:
    """The request body as JSON; NaN and Infinity (which Python would accept) are refused."""
    try:
        return json.loads(body, parse_constant=_no_constant)
    except ValueError as exc:  # JSONDecodeError, bad UTF-8, NaN
        raise ValidationError("body", f"malformed JSON: {exc}") from exc


def _parse(deps: Deps, body: bytes) -> tuple[list[NewSchedule], bool]:
    """Every item of a request validated, or ValidationError listing every bad item."""
    raw = _load(body)
    batch = isinstance(raw, dict) and "schedules" in raw
    if batch:
        if set(raw) != {"schedules"} or not isinstance(raw["schedules"], list):
            raise ValidationError("schedules", "a batch is {\"schedules\": [...]} and nothing else")
        items = raw["schedules"]
        limit = deps.settings.max_batch_items
        if not items or len(items) > limit:
            raise ValidationError("schedules", f"a batch holds 1 to {limit} schedules, "
                                               f"not {len(items)}")
    else:
        items = [raw]
    now = deps.clock.now_ms()
    errors: list[dict[str, Any]] = []
    out: list[NewSchedule] = []
    known: dict[str, bool] = {}
    for i, item in enumerate(items):
        prefix = f"schedules.{i}." if batch else ""
        try:
            value = ScheduleIn.model_validate(item).to_domain(
                now_ms=now, max_payload=deps.settings.max_payload_bytes,
                grace_ms=int(deps.settings.grace_seconds * 1000),
                key_retention_ms=int(deps.settings.task_key_retention_seconds * 1000))
        except pydantic.ValidationError as exc:
            for e in exc.errors():
                where = ".".join(map(str, e["loc"]))
                errors.append({"index": i, "field": prefix + where if where else
                               prefix.rstrip(".") or "body", "reason": e["msg"]})
            continue
        except ValidationError as exc:
            errors.append({"index": i, "field": prefix + exc.field, "reason": exc.reason})
            continue
        if value.channel not in known:
            try:
                deps.store.get_channel(value.channel)
                known[value.channel] = True
            except NotFoundError:
                known[value.channel] = False
        if not known[value.channel]:
            errors.append({"index": i, "field": prefix + "channel",
                           "reason": f"channel {value.channel!r} is not registered"})
            continue
        out.append(value)
    if errors:
        first = errors[0]
        raise ValidationError(first["field"], first["reason"] + (
            f" (and {len(errors) - 1} more errors; nothing was stored)" if len(errors) > 1 else ""),
            errors=errors)
    return out, batch


@router.post("", status_code=201, openapi_extra=_BODY_DOC,
             summary="Schedule one message, or a batch of up to 10 000 (all or nothing)")
async def create(request: Request, response: Response) -> dict[str, Any]:
    deps = Deps.of(request)
    items, batch = await run_in_threadpool(_parse, deps, await request.body())
    results = await run_in_threadpool(deps.store.create, items, now_ms=deps.clock.now_ms())
    if not any(created for _, created in results):
        response.status_code = 200
    answers = [schedule_out(s, full=False) | {"created": created} for s, created in results]
    return {"schedules": answers} if batch else answers[0]


@router.get("/{schedule_id}", summary="A schedule: status, attempts, last error, lateness")
def get(schedule_id: str, request: Request) -> dict[str, Any]:
    return schedule_out(Deps.of(request).store.get(schedule_id))


@router.get("", summary="List schedules (cursor pagination)")
def list_(request: Request, status: Status | None = None, channel: str | None = None,
          due_from: str | None = None, due_to: str | None = None,
          cursor: str | None = None, limit: int = Query(100, ge=1, le=1000)) -> dict[str, Any]:
    store = Deps.of(request).store
    found = store.list(
        status=status, channel=channel,
        due_from_ms=parse_instant(due_from, "due_from") if due_from else None,
        due_to_ms=parse_instant(due_to, "due_to") if due_to else None,
        after_id=cursor, limit=limit)
    return {"items": [schedule_out(s) for s in found],
            "next_cursor": found[-1].id if len(found) == limit else None}


@router.get("/{schedule_id}/deliveries", summary="Every delivery attempt of a schedule")
def deliveries(schedule_id: str, request: Request) -> dict[str, Any]:
    store = Deps.of(request).store
    store.get(schedule_id)
    return {"items": [{"delivery_id": d.delivery_id, "attempt": d.attempt, "epoch": d.epoch,
                       "started_at": iso(d.started_ms), "ended_at": iso(d.ended_ms),
                       "outcome": d.outcome.value, "error": d.error,
                       "lateness_ms": d.lateness_ms} for d in store.deliveries(schedule_id)]}


@router.patch("/{schedule_id}", summary="Reschedule: new due time, payload or headers, "
              "while PENDING (409 with the status when too late)")
def reschedule(schedule_id: str, body: ScheduleChange, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    now = deps.clock.now_ms()
    payload = payload_of(body, max_payload=deps.settings.max_payload_bytes)
    due_ms = due_of(body.due_at, body.delay, now_ms=now,
                    grace_ms=int(deps.settings.grace_seconds * 1000))
    if payload is None and due_ms is None and body.headers is None:
        raise ValidationError("body", "give a new due_at or delay, payload, or headers")
    kind, data = payload if payload else (None, None)
    return schedule_out(deps.store.reschedule(schedule_id, now_ms=now, due_ms=due_ms,
                                              payload=data, payload_kind=kind,
                                              headers=body.headers))


@router.delete("/{schedule_id}", summary="Cancel: 200 = never delivered; 409 = too late")
def cancel(schedule_id: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    return schedule_out(deps.store.cancel(schedule_id, now_ms=deps.clock.now_ms()))

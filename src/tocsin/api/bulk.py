"""Bulk cancel and reschedule by predicate: ``POST /v1/schedules/cancel`` and
``POST /v1/schedules/reschedule``. Bounded (``limit``), chunked in the store, each schedule by
the compare-and-set of a single cancel; tenant-scoped like every ``/v1`` route (a tenant key
changes its own schedules only)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.domain import MAX_BULK, BulkResult, Selection
from tocsin.domain.labels import parse_selector
from tocsin.errors import ValidationError
from tocsin.validation.models import TenantName
from tocsin.validation.parsing import due_of, parse_duration, parse_instant
from tocsin.validation.text import text_problem

__all__ = ["RescheduleWhereIn", "SelectionIn", "router", "shift_ms"]

router = APIRouter(prefix="/v1/schedules", tags=["bulk"])


class SelectionIn(BaseModel):
    """Which waiting schedules to change: every filter given must match, at least one is
    needed besides ``tenant``."""

    model_config = ConfigDict(extra="forbid")

    tenant: TenantName = None
    channel: str | None = Field(None, min_length=1, max_length=256)
    key_prefix: str | None = Field(None, min_length=1, max_length=1024,
                                   description="Keys starting with it (e.g. campaign-7/).")
    ordering_key: str | None = Field(None, min_length=1, max_length=1024)
    recurring_id: str | None = Field(None, min_length=1, max_length=64,
                                     description="Firings of this recurring schedule.")
    due_from: str | None = Field(None, description="RFC 3339; due at or after it.")
    due_to: str | None = Field(None, description="RFC 3339; due strictly before it.")
    label: str | None = Field(None, max_length=1024,
                              description="A label selector: k=v[,k2=v2...], every pair must "
                                          "match.")
    limit: int = Field(10_000, ge=1, le=MAX_BULK,
                       description="The most schedules this call looks at; `more` says "
                                   "whether to call again.")

    def selection(self, request: Request) -> Selection:
        """The store's selection, in the caller's tenant scope."""
        if (problem := text_problem(self.model_dump())) is not None:
            raise ValidationError(problem[0] or "body", problem[1])
        tenant = tenant_for(request, self.tenant) if self.tenant else scope(request)
        return Selection(
            tenant=tenant, channel=self.channel, key_prefix=self.key_prefix,
            ordering_key=self.ordering_key, recurring_id=self.recurring_id,
            due_from_ms=parse_instant(self.due_from, "due_from") if self.due_from else None,
            due_to_ms=parse_instant(self.due_to, "due_to") if self.due_to else None,
            labels=parse_selector(self.label))


class RescheduleWhereIn(SelectionIn):
    """A selection and where its schedules move: to ``due_at`` or ``delay`` from now, or each
    by ``shift`` (seconds or an ISO 8601 duration, ``-`` in front to move earlier)."""

    due_at: str | None = Field(None, description="RFC 3339: the new due time of every one.")
    delay: float | str | None = Field(None, description="Seconds or ISO 8601 from now.")
    shift: float | str | None = Field(None, description="Move each by this much (e.g. PT1H, "
                                                        "-PT30M, 3600).")


def bulk_out(result: BulkResult, verb: str) -> dict[str, Any]:
    """A bulk change as the API answers it."""
    return {"matched": result.matched, verb: result.changed, "too_late": result.too_late,
            "more": result.more}


def shift_ms(value: float | str) -> int:
    """``shift`` in milliseconds: seconds or an ISO 8601 duration, negative with a ``-``."""
    if isinstance(value, str):
        text = value.strip()
        sign, magnitude = (-1, text[1:]) if text.startswith("-") else (1, text)
        numeric = magnitude.isascii() and magnitude.replace(".", "", 1).isdigit()
        span = parse_duration(float(magnitude) if numeric else magnitude, "shift")
    else:
        sign = -1 if value < 0 else 1
        span = parse_duration(abs(value), "shift")
    return sign * (span // timedelta(milliseconds=1))


@router.post("/cancel", summary="Cancel every waiting schedule matching a predicate (bounded by "
             "limit; each by the compare-and-set of a single cancel)")
async def cancel_where(body: SelectionIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    selection = body.selection(request)
    result = await run_in_threadpool(deps.store.cancel_where, selection,
                                     now_ms=deps.clock.now_ms(), limit=body.limit)
    return bulk_out(result, "cancelled")


@router.post("/reschedule", summary="Move every waiting schedule matching a predicate to a new "
             "due time, or each by a shift (bounded by limit)")
async def reschedule_where(body: RescheduleWhereIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    selection = body.selection(request)
    now = deps.clock.now_ms()
    due_ms = due_of(body.due_at, body.delay, now_ms=now, grace_ms=deps.settings.grace_ms)
    if (due_ms is None) == (body.shift is None):
        raise ValidationError("due_at", "give exactly one of due_at, delay or shift")
    shift = None if body.shift is None else shift_ms(body.shift)
    result = await run_in_threadpool(deps.store.reschedule_where, selection, now_ms=now,
                                     due_ms=due_ms, shift_ms=shift, limit=body.limit)
    return bulk_out(result, "rescheduled")

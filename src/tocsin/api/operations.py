"""Operating Tocsin over HTTP: re-drive dead schedules (one, or by predicate) and pause or
resume a channel. Tenant-scoped like every ``/v1`` route."""

from __future__ import annotations

from typing import Any, Literal

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tocsin.abc import PausedChannel
from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.api.views import iso, schedule_out
from tocsin.domain import Status
from tocsin.domain.labels import parse_selector
from tocsin.stores.sql.operations import MAX_REDRIVE
from tocsin.validation.parsing import parse_instant

__all__ = ["RedriveIn", "paused_out", "router"]

router = APIRouter(tags=["operations"])


class RedriveIn(BaseModel):
    """Which DEAD schedules to send again (every filter given must match)."""

    model_config = ConfigDict(extra="forbid")

    channel: str | None = Field(None, max_length=256)
    tenant: str | None = Field(None, max_length=256,
                               description="An admin key may name one; a tenant key's own.")
    due_from: str | None = Field(None, description="RFC 3339; due at or after it.")
    due_to: str | None = Field(None, description="RFC 3339; due strictly before it.")
    limit: int = Field(10_000, ge=1, le=MAX_REDRIVE,
                       description="The most schedules this call sends again.")
    status: Literal["DEAD", "EXPIRED"] = Field(
        "DEAD", description="Re-drive the dead schedules (default) or the expired ones.")
    label: str | None = Field(None, max_length=1024,
                              description="A label selector: k=v[,k2=v2...], every pair must "
                                          "match.")


def paused_out(p: PausedChannel) -> dict[str, Any]:
    """A paused channel as the API answers it."""
    return {"tenant": p.tenant, "name": p.name, "paused": True, "paused_at": iso(p.paused_ms)}


@router.post("/v1/schedules/redrive", summary="Re-drive DEAD (or EXPIRED) schedules matching "
             "a predicate "
             "(bounded by limit; each as a new attempt chain)")
def redrive_where(body: RedriveIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    tenant = tenant_for(request, body.tenant) if body.tenant else scope(request)
    count = deps.store.redrive_where(
        now_ms=deps.clock.now_ms(), tenant=tenant, channel=body.channel,
        due_from_ms=parse_instant(body.due_from, "due_from") if body.due_from else None,
        due_to_ms=parse_instant(body.due_to, "due_to") if body.due_to else None,
        limit=body.limit, status=Status(body.status), labels=parse_selector(body.label))
    return {"redriven": count}


@router.post("/v1/schedules/{schedule_id}/redrive", summary="Re-drive a DEAD schedule: due "
             "now, a new attempt chain, its attempt log kept (409 with the status otherwise)")
def redrive(schedule_id: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    return schedule_out(deps.store.redrive(schedule_id, now_ms=deps.clock.now_ms(),
                                           tenant=scope(request)))


@router.get("/v1/paused-channels", summary="The paused channels")
def paused(request: Request) -> dict[str, Any]:
    return {"items": [paused_out(p) for p in
                      Deps.of(request).store.paused_channels(tenant=scope(request))]}


@router.post("/v1/channels/{name}/pause", summary="Pause a channel: its schedules wait "
             "(PENDING, their lateness growing) until it is resumed")
def pause(name: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    return paused_out(deps.store.pause_channel(name, tenant=tenant_for(request),
                                               now_ms=deps.clock.now_ms()))


@router.post("/v1/channels/{name}/resume", summary="Resume a paused channel")
def resume(name: str, request: Request) -> dict[str, Any]:
    tenant, store = tenant_for(request), Deps.of(request).store
    store.get_channel(name, tenant=tenant)  # 404 for another tenant's, like a missing one
    was = store.resume_channel(name, tenant=tenant)
    return {"tenant": tenant, "name": name, "paused": False, "was_paused": was}

"""``/v1/tenants``: per-tenant settings (durability of their creates, weight of their share of
delivery). Only an admin key
changes them; a tenant key reads its own tenant's and no other (404, like a missing one)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from tocsin.api.auth import principal, require_admin, scope
from tocsin.api.deps import Deps
from tocsin.domain import Durability, Tenant
from tocsin.errors import NotFoundError, ValidationError
from tocsin.validation.models import TENANT_PATTERN

__all__ = ["router"]

router = APIRouter(prefix="/v1/tenants", tags=["tenants"])
_NAME = Path(min_length=1, max_length=64, pattern=TENANT_PATTERN)


class TenantIn(BaseModel):
    """A tenant's settings."""

    model_config = ConfigDict(extra="forbid")

    durability: Durability = Field(
        Durability.STRICT,
        description="strict: creates return once on disk; relaxed: before the flush (a crash "
                    "may lose the last acknowledged creates).")
    weight: int = Field(
        1, ge=1, le=100,
        description="The tenant's share of delivery while other tenants have work due: each of "
                    "its destinations may have this many times the room of a weight-1 tenant's "
                    "queued in a dispatcher before its further schedules wait.")
    events: str | None = Field(
        None, min_length=1, max_length=128,
        description="A channel of the tenant that gets the outcome events (CloudEvents) of "
                    "every channel of the tenant that names no events channel of its own.")


def tenant_out(t: Tenant) -> dict[str, Any]:
    return {"name": t.name, "durability": t.durability.value, "weight": t.weight,
            "events": t.events, "configured": t.configured}


@router.put("/{name}", summary="Configure a tenant")
def put(body: TenantIn, request: Request, name: str = _NAME) -> dict[str, Any]:
    require_admin(request)
    deps = Deps.of(request)
    if body.events is not None:
        try:
            deps.store.get_channel(body.events, tenant=name)
        except NotFoundError:
            raise ValidationError("events", f"no channel {body.events!r} in tenant {name!r}: "
                                            "register it first") from None
    tenant = Tenant(name, Durability(body.durability), weight=body.weight, events=body.events)
    return tenant_out(deps.store.put_tenant(tenant, now_ms=deps.clock.now_ms()))


@router.get("", summary="Every configured tenant (a tenant key: its own)")
def list_(request: Request) -> dict[str, Any]:
    store, only = Deps.of(request).store, scope(request)
    tenants = store.list_tenants() if only is None else [store.get_tenant(only)]
    return {"items": [tenant_out(t) for t in tenants if only is None or t.configured]}


@router.get("/{name}", summary="A tenant's settings (the defaults when never configured)")
def get(request: Request, name: str = _NAME) -> dict[str, Any]:
    caller = principal(request)
    if caller.tenant is not None and caller.tenant != name:
        raise NotFoundError("tenant", name)
    return tenant_out(Deps.of(request).store.get_tenant(name))

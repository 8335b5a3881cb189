"""``/v1/tenants``: per-tenant settings (durability of their creates)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from pydantic import BaseModel, ConfigDict, Field

from tocsin.api.deps import Deps
from tocsin.domain import Durability, Tenant

__all__ = ["router"]

router = APIRouter(prefix="/v1/tenants", tags=["tenants"])
_NAME = Path(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")


class TenantIn(BaseModel):
    """A tenant's settings."""

    model_config = ConfigDict(extra="forbid")

    durability: Durability = Field(
        description="strict: creates return once on disk; relaxed: before the flush (a crash "
                    "may lose the last acknowledged creates).")


def tenant_out(t: Tenant) -> dict[str, Any]:
    return {"name": t.name, "durability": t.durability.value, "configured": t.configured}


@router.put("/{name}", summary="Configure a tenant")
def put(body: TenantIn, request: Request, name: str = _NAME) -> dict[str, Any]:
    deps = Deps.of(request)
    tenant = Tenant(name, Durability(body.durability))
    return tenant_out(deps.store.put_tenant(tenant, now_ms=deps.clock.now_ms()))


@router.get("", summary="Every configured tenant")
def list_(request: Request) -> dict[str, Any]:
    return {"items": [tenant_out(t) for t in Deps.of(request).store.list_tenants()]}


@router.get("/{name}", summary="A tenant's settings (the defaults when never configured)")
def get(request: Request, name: str = _NAME) -> dict[str, Any]:
    return tenant_out(Deps.of(request).store.get_tenant(name))

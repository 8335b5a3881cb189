"""``/v1/ordering-keys``: keys halted by a dead schedule (channel ``on_dead: halt``), and resume."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.api.views import iso

__all__ = ["router"]

router = APIRouter(prefix="/v1/ordering-keys", tags=["ordering keys"])


@router.get("", summary="Ordering keys; halted=true lists the halted ones")
def list_(request: Request, halted: bool = True) -> dict[str, Any]:
    keys = Deps.of(request).store.halted_keys(tenant=scope(request)) if halted else []
    return {"items": [{"tenant": k.tenant, "ordering_key": k.ordering_key, "halted": True,
                       "halted_by": k.schedule_id, "halted_at": iso(k.halted_ms),
                       "reason": k.reason} for k in keys]}


@router.post("/{ordering_key}/resume", summary="Let a halted key's next schedules go")
def resume(ordering_key: str, request: Request) -> dict[str, Any]:
    tenant = tenant_for(request)
    Deps.of(request).store.resume_key(tenant=tenant, ordering_key=ordering_key)
    return {"tenant": tenant, "ordering_key": ordering_key, "halted": False}

"""``/v1/apikeys``: create, list and revoke API keys (admin keys only).

The token is in the answer to its creation and nowhere else, ever: the store keeps its digest.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from tocsin.api.auth import require_admin, scope
from tocsin.api.deps import Deps
from tocsin.apikeys.tokens import describe, issue_key
from tocsin.domain import Role
from tocsin.validation.models import TENANT_PATTERN

__all__ = ["router"]

router = APIRouter(prefix="/v1/apikeys", tags=["api keys"])


class ApiKeyIn(BaseModel):
    """A key to create."""

    model_config = ConfigDict(extra="forbid")

    role: Role = Field(description="admin: every tenant and key management; tenant: one "
                                   "tenant's objects only.")
    tenant: str | None = Field(None, min_length=1, max_length=64, pattern=TENANT_PATTERN,
                               description="The tenant of a tenant key (none for admin).")
    read_only: bool = Field(False, description="Only GET requests.")
    name: str | None = Field(None, min_length=1, max_length=128,
                             description="A label for people, e.g. ci-deployer.")


@router.post("", status_code=201, summary="Create a key; the answer holds its token, "
             "shown this once")
def create(body: ApiKeyIn, request: Request) -> dict[str, Any]:
    require_admin(request)
    deps = Deps.of(request)
    key, token = issue_key(deps.store, role=body.role, tenant=body.tenant,
                           read_only=body.read_only, name=body.name,
                           now_ms=deps.clock.now_ms())
    return describe(key) | {"token": token}


@router.get("", summary="Every key (never a token); ?tenant= lists one tenant's keys")
def list_(request: Request) -> dict[str, Any]:
    require_admin(request)
    return {"items": [describe(k) for k in Deps.of(request).store.list_keys(
        tenant=scope(request))]}


@router.delete("/{key_id}", summary="Revoke a key: it answers 401 from now on")
def revoke(key_id: str, request: Request) -> dict[str, Any]:
    require_admin(request)
    deps = Deps.of(request)
    return describe(deps.store.revoke_key(key_id, now_ms=deps.clock.now_ms()))

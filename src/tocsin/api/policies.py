"""``/v1/policies`` (throttling) and ``/v1/deliveries/{delivery_id}/release`` (a consumer
handing a token back)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request, Response

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.api.views import policy_out
from tocsin.domain import Policy
from tocsin.errors import NotFoundError
from tocsin.validation.models import PolicyIn
from tocsin.validation.parsing import parse_duration

__all__ = ["deliveries", "router"]

router = APIRouter(prefix="/v1/policies", tags=["policies"])
deliveries = APIRouter(prefix="/v1/deliveries", tags=["policies"])


@router.post("", status_code=201, summary="Register or change a throttling policy")
def put(body: PolicyIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    lease = parse_duration(body.token_lease if body.token_lease is not None else 300,
                           "token_lease") // timedelta(milliseconds=1)
    policy = Policy(name=body.name, max_in_flight=body.max_in_flight, rate=body.rate,
                    token_lease_ms=lease, tenant=tenant_for(request, body.tenant))
    now = deps.clock.now_ms()
    return policy_out(deps.store.put_policy(policy, now_ms=now),
                      in_flight=deps.store.in_flight(policy.name, tenant=policy.tenant,
                                                     now_ms=now))


@router.get("", summary="Every policy")
def list_(request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    now = deps.clock.now_ms()
    return {"items": [policy_out(p, in_flight=deps.store.in_flight(p.name, tenant=p.tenant,
                                                                   now_ms=now))
                      for p in deps.store.list_policies(tenant=scope(request))]}


@router.get("/{name}", summary="A policy and how many of its tokens are held")
def get(name: str, request: Request) -> dict[str, Any]:
    deps, tenant = Deps.of(request), tenant_for(request)
    return policy_out(deps.store.get_policy(name, tenant=tenant),
                      in_flight=deps.store.in_flight(name, tenant=tenant,
                                                     now_ms=deps.clock.now_ms()))


@router.delete("/{name}", status_code=204, summary="Forget a policy (409 while in use)")
def delete(name: str, request: Request) -> Response:
    Deps.of(request).store.delete_policy(name, tenant=tenant_for(request))
    return Response(status_code=204)


@deliveries.post("/{delivery_id}/release", summary="Hand a delivery's policy token back")
def release(delivery_id: str, request: Request) -> dict[str, Any]:
    """200 when the token came back; 404 when the delivery holds none (released already,
    its lease ran out, no such delivery, or another tenant's)."""
    deps = Deps.of(request)
    if not deps.store.release(delivery_id, now_ms=deps.clock.now_ms(), tenant=scope(request)):
        raise NotFoundError("token of delivery", delivery_id)
    return {"delivery_id": delivery_id, "released": True}

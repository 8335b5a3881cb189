"""``/v1/policies`` (throttling) and ``/v1/deliveries/{delivery_id}/release`` (a consumer
handing a token back)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Request, Response

from tocsin.api.deps import Deps
from tocsin.api.models import PolicyIn
from tocsin.api.parsing import parse_duration
from tocsin.api.views import policy_out
from tocsin.domain import DEFAULT_TENANT, Policy
from tocsin.errors import NotFoundError

__all__ = ["deliveries", "router"]

router = APIRouter(prefix="/v1/policies", tags=["policies"])
deliveries = APIRouter(prefix="/v1/deliveries", tags=["policies"])


@router.post("", status_code=201, summary="Register or change a throttling policy")
def put(body: PolicyIn, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    lease = parse_duration(body.token_lease if body.token_lease is not None else 300,
                           "token_lease") // timedelta(milliseconds=1)
    policy = Policy(name=body.name, max_in_flight=body.max_in_flight, rate=body.rate,
                    token_lease_ms=lease, tenant=body.tenant)
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
                      for p in deps.store.list_policies()]}


@router.get("/{name}", summary="A policy and how many of its tokens are held")
def get(name: str, request: Request) -> dict[str, Any]:
    deps = Deps.of(request)
    policy = deps.store.get_policy(name, tenant=DEFAULT_TENANT)
    return policy_out(policy, in_flight=deps.store.in_flight(name, tenant=policy.tenant,
                                                             now_ms=deps.clock.now_ms()))


@router.delete("/{name}", status_code=204, summary="Forget a policy (409 while in use)")
def delete(name: str, request: Request) -> Response:
    Deps.of(request).store.delete_policy(name, tenant=DEFAULT_TENANT)
    return Response(status_code=204)


@deliveries.post("/{delivery_id}/release", summary="Hand a delivery's policy token back")
def release(delivery_id: str, request: Request) -> dict[str, Any]:
    """200 when the token came back; 404 when the delivery holds none (released already,
    its lease ran out, or no such delivery)."""
    deps = Deps.of(request)
    if not deps.store.release(delivery_id, now_ms=deps.clock.now_ms()):
        raise NotFoundError("token of delivery", delivery_id)
    return {"delivery_id": delivery_id, "released": True}

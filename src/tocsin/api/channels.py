"""``/v1/channels``: channels are registered once, never given per message."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, Request, Response

from tocsin.api.auth import scope, tenant_for
from tocsin.api.deps import Deps
from tocsin.api.views import channel_out
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.errors import ConflictError, NotFoundError, ValidationError
from tocsin.validation.models import ChannelIn

if TYPE_CHECKING:
    from tocsin.abc import Store

__all__ = ["router"]

router = APIRouter(prefix="/v1/channels", tags=["channels"])


@router.post("", status_code=201, summary="Register or replace a channel (of the key's "
             "tenant: the same name in two tenants is two channels)")
def put(body: ChannelIn, request: Request) -> dict[str, Any]:
    try:
        kind = ChannelKind(body.kind)
    except ValueError:
        from tocsin.channels import kinds

        raise ValidationError("kind", f"{body.kind!r} is not one of "
                                      f"{', '.join(kinds())}") from None
    from tocsin.channels import validate_channel_config
    from tocsin.channels.policy import DestinationPolicy

    policy = DestinationPolicy.from_settings(Deps.of(request).settings)
    tenant = tenant_for(request, body.tenant)
    config = validate_channel_config(kind, body.config, policy, tenant=tenant)
    spec = ChannelSpec(name=body.name, kind=kind, config=config, tenant=tenant)
    deps = Deps.of(request)
    _check_dead_letter(spec, deps.store)
    _check_events(spec, deps.store)
    with deps.quotas.holding(tenant):
        deps.quotas.admit_channel(deps.store, spec)
        stored = deps.store.put_channel(spec)
    return channel_out(stored)


def _check_dead_letter(spec: ChannelSpec, store: Store) -> None:
    """A ``dead_letter`` names another channel of the same tenant that exists, and following
    the dead-letter channels from it never comes back to ``spec`` (a copy sent to itself, to
    nothing, or round a cycle would die again or wait forever)."""
    target = spec.config.get("dead_letter")
    seen = [spec.name]
    while target is not None:
        if target in seen:
            chain = " -> ".join([*seen, target])
            raise ValidationError("config.dead_letter", f"dead letters would go round a cycle: "
                                                        f"{chain}")
        try:
            found = store.get_channel(target, tenant=spec.tenant)
        except NotFoundError:
            raise ValidationError("config.dead_letter", f"no channel {target!r} in tenant "
                                                        f"{spec.tenant!r}: register it first") \
                from None
        seen.append(target)
        target = found.config.get("dead_letter")


def _check_events(spec: ChannelSpec, store: Store) -> None:
    """An ``events`` channel is another channel of the same tenant that exists (its own
    outcomes make no events, so no chain can loop)."""
    target = spec.events
    if target is None:
        return
    if target == spec.name:
        raise ValidationError("config.events", "must name another channel")
    try:
        store.get_channel(target, tenant=spec.tenant)
    except NotFoundError:
        raise ValidationError("config.events", f"no channel {target!r} in tenant "
                                               f"{spec.tenant!r}: register it first") from None


@router.get("", summary="Every registered channel")
def list_(request: Request) -> dict[str, Any]:
    return {"items": [channel_out(s) for s in Deps.of(request).store.list_channels(
        tenant=scope(request))]}


@router.get("/{name}", summary="One channel")
def get(name: str, request: Request) -> dict[str, Any]:
    return channel_out(Deps.of(request).store.get_channel(name, tenant=tenant_for(request)))


@router.post("/{name}/test", summary="Send one marked test message through a channel now, "
             "and answer what came of it (delivered, retry or rejected, the error, the time)")
def test(name: str, request: Request) -> dict[str, Any]:
    from tocsin.channels.policy import DestinationPolicy
    from tocsin.channels.probe import probe_channel

    deps = Deps.of(request)
    spec = deps.store.get_channel(name, tenant=tenant_for(request))
    policy = DestinationPolicy.from_settings(deps.settings)
    return probe_channel(spec, clock=deps.clock, policy=policy).to_json()


@router.delete("/{name}", status_code=204, summary="Forget a channel")
def delete(name: str, request: Request) -> Response:
    store, tenant = Deps.of(request).store, tenant_for(request)
    users = [c.name for c in store.list_channels(tenant=tenant)
             if c.config.get("dead_letter") == name and c.name != name]
    if users:
        raise ConflictError(f"channel {name!r} is the dead-letter channel of "
                            f"{', '.join(sorted(users))}: change those first", ident=name)
    store.delete_channel(name, tenant=tenant)
    return Response(status_code=204)

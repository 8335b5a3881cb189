"""``/v1/channels``: channels are registered once, never given per message."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request, Response

from tocsin.api.deps import Deps
from tocsin.api.models import ChannelIn
from tocsin.api.parsing import unicode_field
from tocsin.api.views import channel_out
from tocsin.domain import DEFAULT_TENANT, ChannelKind, ChannelSpec
from tocsin.errors import ValidationError

__all__ = ["router"]

router = APIRouter(prefix="/v1/channels", tags=["channels"])


@router.post("", status_code=201, summary="Register or replace a channel")
def put(body: ChannelIn, request: Request) -> dict[str, Any]:
    if (bad := unicode_field(body.config)) is not None:
        raise ValidationError(f"config.{bad}", "not Unicode text: holds a lone surrogate")
    try:
        kind = ChannelKind(body.kind)
    except ValueError:
        raise ValidationError("kind", f"{body.kind!r} is not one of "
                                      f"{', '.join(k.value for k in ChannelKind)}") from None
    from tocsin.channels import validate_channel_config

    config = validate_channel_config(kind, body.config)
    spec = ChannelSpec(name=body.name, kind=kind, config=config, tenant=body.tenant)
    return channel_out(Deps.of(request).store.put_channel(spec))


@router.get("", summary="Every registered channel")
def list_(request: Request) -> dict[str, Any]:
    return {"items": [channel_out(s) for s in Deps.of(request).store.list_channels()]}


@router.get("/{name}", summary="One channel")
def get(name: str, request: Request) -> dict[str, Any]:
    return channel_out(Deps.of(request).store.get_channel(name, tenant=DEFAULT_TENANT))


@router.delete("/{name}", status_code=204, summary="Forget a channel")
def delete(name: str, request: Request) -> Response:
    Deps.of(request).store.delete_channel(name, tenant=DEFAULT_TENANT)
    return Response(status_code=204)

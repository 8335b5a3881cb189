"""The FastAPI application (OpenAPI at ``/docs``)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from tocsin.abc import Store
from tocsin.api import (
    apikeys,
    channels,
    health,
    ordering,
    policies,
    recurring,
    schedules,
    tenants,
)
from tocsin.api.auth import authenticate
from tocsin.api.deps import Deps
from tocsin.api.errors import install_error_handlers
from tocsin.api.quotas import Quotas
from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings

__all__ = ["create_app"]

_ERROR = {"content": {"application/json": {"schema": {"type": "object"}}}}
KEYED_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "No API key, or an unknown or revoked one", **_ERROR},
    403: {"description": "The key may not do this (read-only, another tenant, not admin)",
          **_ERROR},
}
"""What every keyed route may answer besides its own statuses."""


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               clock: Clock | None = None, expect_dispatcher: bool = False) -> FastAPI:
    """The API over ``store``; when none is given it opens ``settings.store_url`` (with
    ``settings.buckets``) and closes it when the server shuts down.

    ``expect_dispatcher``: ``/readyz`` also wants a dispatcher heartbeat within
    max(10 s, 5 * ``settings.trigger_seconds``) (set it where a dispatcher runs beside the API).
    """
    settings = settings or Settings()
    app = FastAPI(title="Tocsin", version="0.1.0",
                  description="A durable scheduler of delayed messages.")
    if store is None:
        from tocsin.stores import open_store

        store = open_store(settings.store_url, buckets=settings.buckets)
        app.router.add_event_handler("shutdown", store.close)
    app.state.deps = Deps(store=store, clock=clock or SystemClock(), settings=settings,
                          expect_dispatcher=expect_dispatcher, quotas=Quotas.of(settings))
    install_error_handlers(app)
    keyed = [m.router for m in (schedules, recurring, policies, channels, tenants, ordering,
                                apikeys)]
    for router in [*keyed, policies.deliveries]:
        app.include_router(router, dependencies=[Depends(authenticate)],
                           responses=KEYED_RESPONSES)
    app.include_router(health.router)
    _describe_request_bodies(app)
    return app


def _describe_request_bodies(app: FastAPI) -> None:
    """Add the schemas of bodies a route reads itself to the OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            components = generate().setdefault("components", {})
            components.setdefault("schemas", {}).update(schedules.openapi_schemas())
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]

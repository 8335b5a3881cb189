"""The FastAPI application (OpenAPI at ``/openapi.json``, Swagger UI at ``/docs`` from the
install's own files: :mod:`tocsin.api.docs`)."""

from __future__ import annotations

from typing import Any

from fastapi import Depends, FastAPI

from tocsin import __version__
from tocsin.abc import Store
from tocsin.api import (
    apikeys,
    audit,
    bulk,
    channels,
    health,
    operations,
    ordering,
    policies,
    recurring,
    schedules,
    stats,
    status,
    tenants,
)
from tocsin.api.auth import authenticate
from tocsin.api.deps import Deps
from tocsin.api.errors import install_error_handlers
from tocsin.api.gate import KeyGate
from tocsin.api.limits import BodyLimits
from tocsin.api.params import check_params
from tocsin.api.responses import document_errors
from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.quotas import Quotas

__all__ = ["create_app"]


def create_app(settings: Settings | None = None, *, store: Store | None = None,
               clock: Clock | None = None, expect_dispatcher: bool = False) -> FastAPI:
    """The API over ``store``; when none is given it opens ``settings.store_url`` (with
    ``settings.buckets``) and closes it when the server shuts down.

    ``expect_dispatcher``: ``/readyz`` also wants a dispatcher heartbeat within
    max(10 s, 5 * ``settings.trigger_seconds``) (set it where a dispatcher runs beside the API).
    """
    settings = settings or Settings()
    app = FastAPI(title="Tocsin", version=__version__,
                  description="A durable scheduler of delayed messages.",
                  dependencies=[Depends(check_params)], docs_url=None, redoc_url=None)
    if store is None:
        from tocsin.stores import open_store

        store = open_store(settings.store_url, buckets=settings.buckets)
        app.router.add_event_handler("shutdown", store.close)
    app.state.deps = Deps(store=store, clock=clock or SystemClock(), settings=settings,
                          expect_dispatcher=expect_dispatcher, quotas=Quotas.of(settings))
    install_error_handlers(app)
    app.add_middleware(audit.AuditTrail, store=store, clock=app.state.deps.clock)
    app.add_middleware(BodyLimits, max_bytes=settings.max_body_bytes,
                       max_depth=settings.max_json_depth)
    app.add_middleware(KeyGate, store=store)  # outermost: the key before the body
    keyed = [m.router for m in (operations, status, bulk, stats, schedules, recurring, policies,
                                channels, tenants, ordering, apikeys, audit)]
    for router in [*keyed, policies.deliveries]:
        app.include_router(router, dependencies=[Depends(authenticate)])
    app.include_router(health.router)
    from tocsin.api.docs import install_docs
    from tocsin.api.ui import install_ui

    install_docs(app)
    install_ui(app)
    _describe_request_bodies(app)
    return app


def _describe_request_bodies(app: FastAPI) -> None:
    """Add the schemas of bodies a route reads itself, and every operation's error answers
    (:func:`~tocsin.api.responses.document_errors`), to the OpenAPI document."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = generate()
            components = document.setdefault("components", {})
            components.setdefault("schemas", {}).update(schedules.openapi_schemas())
            document_errors(document)
        return app.openapi_schema or generate()

    app.openapi = openapi  # type: ignore[method-assign]

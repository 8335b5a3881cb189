"""``/healthz`` (the process answers), ``/readyz`` (the store answers and, when a dispatcher is
expected, it beat recently) and ``/metrics``.

``/healthz`` never asks for a key. ``/readyz`` and ``/metrics`` answer anyone by default (load
balancers and Prometheus rarely carry keys, and the API binds to loopback unless told
otherwise); ``readyz_needs_key`` makes ``/readyz`` want a valid key. ``/metrics`` labels its
series with every tenant's channels and policies, so it wants an admin key once the store holds
more than one tenant (:func:`many_tenants`), unless ``metrics_needs_key`` says otherwise
(``true``: always, ``false``: never)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CollectorRegistry, generate_latest

from tocsin.abc import Store
from tocsin.api.auth import authenticate, require_admin
from tocsin.api.deps import Deps
from tocsin.api.metrics import StoreCollector
from tocsin.dispatcher.beat import DISPATCHER, SOURCE
from tocsin.dispatcher.runs import RUN_STALE_MS
from tocsin.domain import DEFAULT_TENANT
from tocsin.domain.defaults import ms
from tocsin.errors import StoreError

__all__ = ["readiness_problems", "router"]

log = logging.getLogger("tocsin.api")

router = APIRouter(tags=["health"])


def _ready_gate(request: Request) -> None:
    if Deps.of(request).settings.readyz_needs_key:
        authenticate(request)


def many_tenants(store: Store) -> bool:
    """Whether ``store`` holds a tenant besides ``default``: a key bound to one, a channel or
    a policy of one, or its settings."""
    return (any(k.tenant not in (None, DEFAULT_TENANT) for k in store.list_keys())
            or any(c.tenant != DEFAULT_TENANT for c in store.list_channels())
            or any(p.tenant != DEFAULT_TENANT for p in store.list_policies())
            or any(t.name != DEFAULT_TENANT for t in store.list_tenants()))


def _metrics_gate(request: Request) -> None:
    deps = Deps.of(request)
    needs = deps.settings.metrics_needs_key
    if needs or (needs is None and many_tenants(deps.store)):
        authenticate(request, request.query_params.get("tenant"))
        require_admin(request)


_GATED: dict[int | str, dict[str, Any]] = {
    401: {"description": "No valid key (when the setting asks for one)"},
    403: {"description": "Not an admin key (when the setting asks for one)"}}


@router.get("/healthz", summary="The process is up")
def healthz() -> dict[str, Any]:
    return {"status": "ok"}


@router.get("/readyz", summary="The store answers and the dispatcher is alive",
            dependencies=[Depends(_ready_gate)], responses={401: _GATED[401]})
def readyz(request: Request) -> JSONResponse:
    problems = [_public(p) for p in readiness_problems(Deps.of(request))]
    status = 503 if problems else 200
    return JSONResponse({"status": "unready" if problems else "ready", "problems": problems},
                        status_code=status)


def _public(problem: str) -> str:
    """A problem as ``/readyz`` (open without a key) may say it: a store's error names its
    URL, file or host, so only the server's log has it."""
    if problem.startswith("store: "):
        log.error("readyz: %s", problem)
        return "store: the store does not answer (the server's log says why)"
    return problem


def readiness_problems(deps: Deps) -> list[str]:
    """Why ``/readyz`` answers 503 (empty: ready): the store does not answer, or a dispatcher
    is expected and is not ready (``tocsin up`` logs "ready" when this first turns empty)."""
    try:
        deps.store.ping()
        return _dispatcher_problems(deps) if deps.expect_dispatcher else []
    except StoreError as exc:
        return [f"store: {exc}"]


def _dispatcher_problems(deps: Deps) -> list[str]:
    """Why the dispatcher is not ready: its newest run (:mod:`tocsin.dispatcher.runs`) has not
    finished its first batch (workers started, channels open) or stopped beating while no
    other run that owns buckets is ready and beating (several dispatchers), or neither
    its batch beat nor its idle beat (written every few seconds even when nothing is due) is
    within max(10 s, 5 triggers)."""
    window_ms = ms(max(10.0, 5 * deps.settings.trigger_seconds))
    runs, now = deps.store.runs(), deps.clock.now_ms()
    owning = {o.run for o in deps.store.owners()} if len(runs) > 1 else set()
    serving = [r for r in runs if r.run in owning and r.ready_ms is not None
               and now - r.beat_ms <= RUN_STALE_MS]
    if runs and not serving:  # several dispatchers: one joining does not stop the others
        newest = runs[0]
        if now - newest.beat_ms > RUN_STALE_MS:
            return [f"dispatcher: run {newest.run} has not beaten for "
                    f"{(now - newest.beat_ms) / 1000:.1f} s"]
        if newest.ready_ms is None:
            return [f"dispatcher: run {newest.run} is starting (its first batch has not run)"]
    beats = [b[0] for b in (deps.store.last_beat(DISPATCHER), deps.store.last_beat(SOURCE)) if b]
    if not beats:
        return [f"dispatcher: no heartbeat yet (expected within {window_ms / 1000:g} s)"]
    age_ms = deps.clock.now_ms() - max(beats)
    if age_ms > window_ms:
        return [f"dispatcher: no heartbeat for {age_ms / 1000:.1f} s "
                f"(expected within {window_ms / 1000:g} s)"]
    return []


@router.get("/metrics", summary="Prometheus metrics", response_class=PlainTextResponse,
            dependencies=[Depends(_metrics_gate)], responses=_GATED)
def metrics(request: Request) -> PlainTextResponse:
    deps = Deps.of(request)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(StoreCollector(deps.store, deps.clock))
    return PlainTextResponse(generate_latest(registry).decode(),
                             media_type="text/plain; version=0.0.4")

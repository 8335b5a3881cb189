"""``GET /v1/stats``: the live figures per channel (and tenant): what waits, what falls due
soon, what finished within a window and how late recent deliveries were. Every figure comes
from a bounded index range (:mod:`tocsin.stores.sql.stats`); the full analysis over weeks is
``tocsin report``."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from fastapi import APIRouter, Query, Request
from starlette.concurrency import run_in_threadpool

from tocsin.abc import ChannelStats
from tocsin.api.auth import scope
from tocsin.api.deps import Deps
from tocsin.api.views import iso
from tocsin.domain.labels import parse_selector
from tocsin.errors import ValidationError
from tocsin.validation.parsing import parse_duration

__all__ = ["MAX_WINDOW", "router", "stats_out"]

router = APIRouter(tags=["stats"])

MAX_WINDOW = timedelta(days=1)
"""The longest window (and look-ahead) the live figures cover."""


def stats_out(s: ChannelStats) -> dict[str, Any]:
    """One channel's figures as the API answers them."""
    late = s.lateness_ms
    return {"tenant": s.tenant, "channel": s.channel, "pending": s.pending,
            "due_soon": s.due_soon, "delivered": s.delivered, "dead": s.dead,
            "cancelled": s.cancelled, "retried": s.retried, "expired": s.expired,
            "lateness_ms": None if late is None else dict(zip(("p50", "p95", "p99", "max"),
                                                              late, strict=True))}


def _span(value: str, field: str) -> int:
    numeric = value.isascii() and value.replace(".", "", 1).isdigit()  # not '²' or '٣'
    span = parse_duration(float(value) if numeric else value, field)
    if not timedelta(seconds=1) <= span <= MAX_WINDOW:
        raise ValidationError(field, f"must be between 1 s and {MAX_WINDOW}")
    return span // timedelta(milliseconds=1)


@router.get("/v1/stats", summary="Live figures per channel: pending, due soon, finished and "
            "lateness percentiles within a recent window")
async def stats(
    request: Request,
    window: str = Query("PT1H", description="How far back finished schedules and deliveries "
                        "count (seconds or ISO 8601, at most a day)."),
    ahead: str = Query("PT1H", description="How far ahead `due_soon` looks."),
    label: str | None = Query(None, max_length=1024, description="A label selector: "
                              "k=v[,k2=v2...]; the figures of the schedules carrying every "
                              "pair (and of their attempts) only."),
) -> dict[str, Any]:
    deps = Deps.of(request)
    window_ms, ahead_ms = _span(window, "window"), _span(ahead, "ahead")
    labels = parse_selector(label)
    now = deps.clock.now_ms()
    found = await run_in_threadpool(deps.store.stats, now_ms=now, window_ms=window_ms,
                                    ahead_ms=ahead_ms, tenant=scope(request), labels=labels)
    out = {"at": iso(now), "window_s": window_ms / 1000, "ahead_s": ahead_ms / 1000,
           "channels": [stats_out(s) for s in found]}
    if labels:
        out["label"] = ",".join(f"{k}={v}" for k, v in labels)
    return out

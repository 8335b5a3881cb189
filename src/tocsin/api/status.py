"""``GET /v1/status``: the one-screen summary behind ``tocsin status`` and the dashboard's
overview — API, dispatcher and expander health, the dispatchers and the buckets each owns
(an admin's view), backlog, what falls due in the next hour,
the dead, halted keys, paused channels, and the destinations the dispatcher holds (an open
circuit breaker, a full lane). Scoped like every read (a tenant key: its own)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from tocsin.abc import ChannelHold
from tocsin.api.auth import scope
from tocsin.api.deps import Deps
from tocsin.api.views import iso
from tocsin.dispatcher.beat import DISPATCHER, SOURCE
from tocsin.dispatcher.expansion import EXPANDER
from tocsin.domain import HoldReason
from tocsin.domain.defaults import ms
from tocsin.errors import StoreError

__all__ = ["dispatchers", "held_by_channel", "router", "summary"]

router = APIRouter(tags=["operations"])
HOUR_MS = 3_600_000


def _component(deps: Deps, *names: str, window_ms: int) -> dict[str, Any]:
    """A component's health from the newest of its beats."""
    beats = [b for b in (deps.store.last_beat(n) for n in names) if b]
    if not beats:
        return {"healthy": False, "last_beat": None, "age_s": None}
    at, info = max(beats, key=lambda b: b[0])
    age = deps.clock.now_ms() - at
    return {"healthy": age <= window_ms, "last_beat": iso(at), "age_s": round(age / 1000, 1),
            **({"last_batch_ms": info["batch_ms"]} if "batch_ms" in info else {})}


def held_by_channel(holds: list[ChannelHold]) -> dict[tuple[str, str], ChannelHold]:
    """One hold per destination: an open breaker over an undeliverable kind over a full
    lane, else the latest."""
    out: dict[tuple[str, str], ChannelHold] = {}
    for h in holds:
        seen = out.get((h.tenant, h.name))
        if seen is None or _rank(h) > _rank(seen) or (
                h.reason == seen.reason and h.until_ms > seen.until_ms):
            out[(h.tenant, h.name)] = h
    return out


_RANKS = {HoldReason.OPEN: 2, HoldReason.UNDELIVERABLE: 1}


def _rank(hold: ChannelHold) -> int:
    """Which of a destination's holds ``tocsin status`` shows first (the higher)."""
    return _RANKS.get(HoldReason(hold.reason), 0)


def dispatchers(deps: Deps) -> list[dict[str, Any]]:
    """The dispatcher runs that are members or joining, oldest first: where each runs, its
    checkpoint slot, when it started, beat and became ready, and the buckets it owns (ranges,
    under which generation, since when)."""
    store, now = deps.store, deps.clock.now_ms()
    owners = store.owners()
    out = []
    for run in sorted(store.runs(), key=lambda r: (r.started_ms, r.run)):
        owned = [o for o in owners if o.run == run.run]
        out.append({
            "run": run.run, "host": run.host, "pid": run.pid, "slot": run.slot,
            "started": iso(run.started_ms), "last_beat": iso(run.beat_ms),
            "age_s": round((now - run.beat_ms) / 1000, 1),
            "ready": run.ready_ms is not None,
            "buckets": [f"{o.lo}-{o.hi}" for o in owned],
            "owns_since": iso(min(o.since_ms for o in owned)) if owned else None,
            "generation": max((o.generation for o in owned), default=None),
        })
    return out


def summary(deps: Deps, tenant: str | None) -> dict[str, Any]:
    """The status of the store (of ``tenant``'s schedules, or all when None)."""
    store, now = deps.store, deps.clock.now_ms()
    try:
        store.ping()
    except StoreError as exc:
        return {"api": "ok", "store": f"unavailable: {exc}"}
    window = ms(max(10.0, 5 * deps.settings.trigger_seconds))
    return {
        "api": "ok", "store": "ok", "tenant": tenant,
        "dispatcher": _component(deps, DISPATCHER, SOURCE, window_ms=window),
        # the expander beats only after a batch: a quiet one is not a dead one
        "expander": _component(deps, EXPANDER, window_ms=max(window, HOUR_MS)),
        "backlog": store.due_between(from_ms=0, to_ms=now + 1, tenant=tenant),
        "due_next_hour": store.due_between(from_ms=now + 1, to_ms=now + HOUR_MS, tenant=tenant),
        "dead": store.dead_count(tenant=tenant),
        "halted_keys": [{"tenant": k.tenant, "ordering_key": k.ordering_key}
                        for k in store.halted_keys(tenant=tenant)],
        "paused_channels": [{"tenant": p.tenant, "name": p.name}
                            for p in store.paused_channels(tenant=tenant)],
        "held_channels": [{"tenant": h.tenant, "name": h.name, "reason": h.reason,
                           "since": iso(h.since_ms), "until": iso(h.until_ms),
                           "failures": h.failures, "last_error": h.last_error}
                          for h in held_by_channel(store.channel_holds(tenant=tenant)).values()],
        "in_flight": sum(store.claimed_by_channel(tenant=tenant).values()),
        # the machines and processes behind the service: an operator's view, not a tenant's
        **({"dispatchers": dispatchers(deps)} if tenant is None else {}),
    }


@router.get("/v1/status", summary="One-screen summary: health, backlog, due next hour, dead, "
            "halted keys, paused channels")
def status(request: Request) -> dict[str, Any]:
    return summary(Deps.of(request), scope(request))

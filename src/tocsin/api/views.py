"""Tocsin's values as the API answers them: instants in RFC 3339 UTC with ``Z``, payloads in
the form they were given."""

from __future__ import annotations

from typing import Any

from tocsin.clock import iso_ms
from tocsin.domain import (
    ChannelSpec,
    Delivery,
    IntervalTrigger,
    PayloadKind,
    Policy,
    Recurring,
    Schedule,
    Status,
)
from tocsin.domain.defaults import seconds
from tocsin.domain.schedule import payload_value
from tocsin.domain.terms import Terms
from tocsin.redact import redact

__all__ = ["channel_out", "delivery_out", "iso", "policy_out", "recurring_out", "schedule_out",
           "terms_out"]


def iso(ms: int | None) -> str | None:
    """UTC milliseconds as RFC 3339 with ``Z``."""
    return None if ms is None else iso_ms(ms)


def schedule_out(s: Schedule, *, full: bool = True) -> dict[str, Any]:
    """A schedule as the API answers it."""
    out: dict[str, Any] = {
        "id": s.id,
        "status": s.status.value,
        "due_at": iso(s.due_ms),
        "bucket": s.bucket,
    }
    if full:
        out.update(
            {
                "tenant": s.tenant,
                "channel": s.channel,
                "created_at": iso(s.created_ms),
                "attempts": s.attempts,
                "last_error": s.last_error,
                "next_attempt_at": iso(s.next_ms) if s.status is Status.PENDING else None,
                "delivered_at": iso(s.delivered_ms),
                "lateness_ms": s.lateness_ms,
                "headers": s.headers,
                "key": s.key,
                "ordering_key": s.ordering_key,
                "policy": s.policy,
                "recurring_id": s.recurring_id,
                **terms_out(s.terms),
                "labels": s.labels,
                **payload_value(s.payload_kind, s.payload),
            }
        )
        if s.payload_kind is PayloadKind.TEXT:
            out["payload_text"] = out.pop("payload")
    return out


def terms_out(terms: Terms | None) -> dict[str, Any]:
    """A schedule's own delivery terms as the API answers them (durations in seconds; None:
    its channel's)."""
    retry = terms.retry.to_json() if terms and terms.retry else None
    return {
        "expires_at": iso(terms.expires_ms) if terms and terms.expires_ms is not None else None,
        "max_lateness": (terms.max_lateness_ms / 1000
                         if terms and terms.max_lateness_ms is not None else None),
        "retry": None if not retry else {
            _RETRY_OUT.get(k, k): (v / 1000 if k.endswith("_ms") else v)
            for k, v in retry.items()},
        "body": str(terms.body) if terms and terms.body else None,
        "method": str(terms.method) if terms and terms.method else None,
        "path": terms.path if terms else None,
    }


_RETRY_OUT = {"base_ms": "base", "cap_ms": "cap", "max_duration_ms": "max_retry_duration"}


def delivery_out(d: Delivery) -> dict[str, Any]:
    """One attempt as the API answers it."""
    return {"delivery_id": d.delivery_id, "attempt": d.attempt, "epoch": d.epoch,
            "started_at": iso(d.started_ms), "ended_at": iso(d.ended_ms),
            "outcome": d.outcome.value, "error": d.error, "lateness_ms": d.lateness_ms}


def channel_out(spec: ChannelSpec) -> dict[str, Any]:
    """A channel as the API answers it: secrets are write-only, shown as ``"***"``."""
    return {"name": spec.name, "tenant": spec.tenant, "kind": spec.kind.value,
            "config": redact(spec.config)}


def _state(r: Recurring, following: list[int]) -> str:
    """FAILED (its expansion failed: see ``failed_reason``), PAUSED, ACTIVE or ENDED."""
    if r.failed_reason:
        return "FAILED"
    if r.paused:
        return "PAUSED"
    return "ACTIVE" if following else "ENDED"


def _rule_out(r: Recurring) -> dict[str, Any]:
    """``cron``, or ``every`` (ISO 8601) and its ``anchor``: the other ones null."""
    t = r.trigger
    if isinstance(t, IntervalTrigger):
        return {"cron": None, "every": t.every, "anchor": iso(t.anchor_ms)}
    return {"cron": t.expr, "every": None, "anchor": None}


def recurring_out(r: Recurring, *, now_ms: int) -> dict[str, Any]:
    """A recurring schedule as the API answers it."""
    following = [] if r.paused or r.failed_reason else r.trigger.next(now_ms)
    out: dict[str, Any] = {
        "id": r.id, "tenant": r.tenant, **_rule_out(r),
        "jitter": seconds(r.jitter_ms), "timezone": r.trigger.timezone.key,
        "start": iso(r.trigger.start_ms), "end": iso(r.trigger.end_ms), "channel": r.channel,
        "headers": r.headers,
        "count": r.count, "stagger": seconds(r.stagger_ms), "misfire": r.misfire.value,
        "misfire_grace": seconds(r.misfire_grace_ms), "policy": r.policy, "paused": r.paused,
        "labels": r.labels,
        "state": _state(r, following), "failed_reason": r.failed_reason,
        "failed_at": iso(r.failed_ms),
        "revision": r.revision, "next_firing_at": iso(following[0]) if following else None,
        "expanded_until": iso(r.expanded_until_ms), "created_at": iso(r.created_ms),
        "updated_at": iso(r.updated_ms),
        **{k: v for k, v in terms_out(r.terms).items() if k in ("max_lateness", "retry")},
        **payload_value(r.payload_kind, r.payload),
    }
    if r.payload_kind is PayloadKind.TEXT:
        out["payload_text"] = out.pop("payload")
    return out


def policy_out(p: Policy, *, in_flight: int | None = None) -> dict[str, Any]:
    """A throttling policy as the API answers it."""
    out: dict[str, Any] = {"name": p.name, "tenant": p.tenant,
                           "max_in_flight": p.max_in_flight, "rate": p.rate,
                           "token_lease": seconds(p.token_lease_ms)}
    if in_flight is not None:
        out["in_flight"] = in_flight
    return out

"""Tocsin's values as the API answers them: instants in RFC 3339 UTC with ``Z``, payloads in
the form they were given."""

from __future__ import annotations

from typing import Any

from tocsin.clock import from_ms
from tocsin.domain import ChannelSpec, Delivery, PayloadKind, Schedule, Status
from tocsin.domain.schedule import payload_value

__all__ = ["channel_out", "delivery_out", "iso", "schedule_out"]


def iso(ms: int | None) -> str | None:
    """UTC milliseconds as RFC 3339 with ``Z``."""
    return (
        None
        if ms is None
        else from_ms(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


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
                **payload_value(s.payload_kind, s.payload),
            }
        )
        if s.payload_kind is PayloadKind.TEXT:
            out["payload_text"] = out.pop("payload")
    return out


def delivery_out(d: Delivery) -> dict[str, Any]:
    """One attempt as the API answers it."""
    return {"delivery_id": d.delivery_id, "attempt": d.attempt, "epoch": d.epoch,
            "started_at": iso(d.started_ms), "ended_at": iso(d.ended_ms),
            "outcome": d.outcome.value, "error": d.error, "lateness_ms": d.lateness_ms}


def channel_out(spec: ChannelSpec) -> dict[str, Any]:
    """A channel as the API answers it."""
    return {"name": spec.name, "kind": spec.kind.value, "config": spec.config}

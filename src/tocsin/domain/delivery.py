"""Deliveries: one attempt to hand a schedule to its channel, and what came of it."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tocsin.clock import from_ms
from tocsin.domain.schedule import PayloadKind, Status, payload_value

__all__ = ["Ack", "Delivery", "Envelope", "Outcome", "Result"]

ENVELOPE_VERSION = 1


class Outcome(StrEnum):
    """What one delivery attempt came to."""

    DELIVERED = "delivered"
    """The channel accepted the message."""
    RETRY = "retry"
    """A transient failure: tried again after a back-off, until the attempts run out."""
    REJECTED = "rejected"
    """A permanent refusal: the schedule is dead at once."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Envelope:
    """What a channel is handed: one claimed schedule, at one attempt."""

    schedule_id: str
    delivery_id: str
    attempt: int
    epoch: int
    tenant: str
    channel: str
    payload: bytes
    payload_kind: PayloadKind
    headers: dict[str, str] = field(default_factory=dict)
    due_ms: int
    key: str | None = None
    ordering_key: str | None = None

    def transport_headers(self) -> dict[str, str]:
        """Tocsin's own headers, for transports that carry headers beside the body."""
        return {
            **self.headers,
            "Tocsin-Schedule-Id": self.schedule_id,
            "Tocsin-Delivery-Id": self.delivery_id,
            "Tocsin-Attempt": str(self.attempt),
            "Tocsin-Due-At": from_ms(self.due_ms).isoformat().replace("+00:00", "Z"),
        }

    def to_json(self) -> dict[str, Any]:
        """The versioned JSON envelope written by the file channel and POSTed by webhooks."""
        return {
            "v": ENVELOPE_VERSION,
            "schedule_id": self.schedule_id,
            "delivery_id": self.delivery_id,
            "attempt": self.attempt,
            "tenant": self.tenant,
            "channel": self.channel,
            "due_at": from_ms(self.due_ms).isoformat().replace("+00:00", "Z"),
            "key": self.key,
            "ordering_key": self.ordering_key,
            "headers": self.headers,
            **payload_value(self.payload_kind, self.payload),
        }

    def to_json_bytes(self) -> bytes:
        """:meth:`to_json` as compact UTF-8."""
        return json.dumps(self.to_json(), separators=(",", ":")).encode()


@dataclass(frozen=True, kw_only=True, slots=True)
class Result:
    """A channel's answer for one envelope."""

    delivery_id: str
    outcome: Outcome
    error: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Delivery:
    """One recorded attempt, as the attempt log keeps it."""

    delivery_id: str
    schedule_id: str
    attempt: int
    epoch: int
    started_ms: int
    ended_ms: int
    outcome: Outcome
    error: str | None
    lateness_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class Ack:
    """The dispatcher's verdict on one attempt, for the store to apply under the epoch fence."""

    schedule_id: str
    delivery_id: str
    attempt: int
    outcome: Outcome
    error: str | None
    started_ms: int
    ended_ms: int
    due_ms: int
    status: Status
    """DELIVERED, PENDING (retry at ``next_ms``) or DEAD."""
    next_ms: int | None = None
    dead_letter: str | None = None
    """Channel that gets a copy when ``status`` is DEAD."""

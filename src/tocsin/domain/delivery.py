"""Deliveries: one attempt to hand a schedule to its channel, and what came of it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple

from tocsin.clock import iso_ms
from tocsin.domain.headers import stored_headers
from tocsin.domain.schedule import PayloadKind, Status, payload_value
from tocsin.domain.terms import Terms

__all__ = ["LATENESS_BOUNDS_MS", "Ack", "Delivery", "Envelope", "Outcome", "Result"]

LATENESS_BOUNDS_MS = (1, 2, 5, 10, 20, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000,
                      60000, 300000)
"""Upper bounds of the lateness histogram's buckets (the last bucket is unbounded). They start at
a millisecond: a dispatcher that hands each schedule over at its due instant is a few
milliseconds late, and a first bucket of 50 ms read every run as "p99 ≤ 0.05 s"."""

ENVELOPE_VERSION = 1
NO_HEADERS: Mapping[str, str] = MappingProxyType({})
_ENCODER = json.JSONEncoder(separators=(",", ":"))
_quote = json.encoder.encode_basestring_ascii


class Outcome(StrEnum):
    """What one delivery attempt came to."""

    DELIVERED = "delivered"
    """The channel accepted the message."""
    RETRY = "retry"
    """A transient failure: tried again after a back-off, until the attempts run out."""
    REJECTED = "rejected"
    """A permanent refusal: the schedule is dead at once."""
    EXPIRED = "expired"
    """Not sent: the schedule's deadline had passed when its turn came (it is EXPIRED)."""


class Envelope(NamedTuple):
    """What a channel is handed: one claimed schedule, at one attempt. (Named tuples, not
    frozen dataclasses, for the three per-delivery values: they are built on the hot path.)"""

    schedule_id: str
    delivery_id: str
    attempt: int
    epoch: int
    tenant: str
    channel: str
    payload: bytes
    payload_kind: PayloadKind
    due_ms: int
    headers: Mapping[str, str] = NO_HEADERS
    key: str | None = None
    ordering_key: str | None = None
    terms: Terms | None = None
    """The schedule's delivery terms (its body's format, a webhook's method and path)."""

    def transport_headers(self) -> dict[str, str]:
        """The schedule's headers and Tocsin's own, for transports that carry headers beside
        the body; a schedule's ``Tocsin-*`` header (stored before the edge refused them) is
        dropped, so none shadows Tocsin's in any case."""
        return {
            **stored_headers(self.headers),
            "Tocsin-Schedule-Id": self.schedule_id,
            "Tocsin-Delivery-Id": self.delivery_id,
            "Tocsin-Attempt": str(self.attempt),
            "Tocsin-Due-At": iso_ms(self.due_ms),
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
            "due_at": iso_ms(self.due_ms),
            "key": self.key,
            "ordering_key": self.ordering_key,
            "headers": dict(self.headers),
            **payload_value(self.payload_kind, self.payload),
        }

    def to_json_bytes(self) -> bytes:
        """:meth:`to_json` as compact UTF-8 on one line. A JSON payload is spliced in as stored
        rather than parsed and encoded again: this is the dispatcher's hot path."""
        if self.payload_kind is not PayloadKind.JSON or b"\n" in self.payload:
            return _ENCODER.encode(self.to_json()).encode()
        q = _quote
        head = (
            f'{{"v":{ENVELOPE_VERSION},"schedule_id":{q(self.schedule_id)},'
            f'"delivery_id":{q(self.delivery_id)},"attempt":{self.attempt:d},'
            f'"tenant":{q(self.tenant)},"channel":{q(self.channel)},'
            f'"due_at":"{iso_ms(self.due_ms)}",'
            f'"key":{"null" if self.key is None else q(self.key)},'
            f'"ordering_key":{"null" if self.ordering_key is None else q(self.ordering_key)},'
            f'"headers":{_ENCODER.encode(dict(self.headers)) if self.headers else "{}"},'
            '"payload":'
        )
        return b"".join((head.encode(), self.payload, b"}"))


class Result(NamedTuple):
    """A channel's answer for one envelope."""

    delivery_id: str
    outcome: Outcome
    error: str | None = None
    retry_after_ms: int | None = None
    """For RETRY: the channel's own wait before the next attempt (a receiver's
    ``Retry-After``), instead of the retry policy's back-off."""


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


class Ack(NamedTuple):
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
    """DELIVERED, PENDING (retry at ``next_ms``), DEAD or EXPIRED."""
    next_ms: int | None = None
    dead_letter: str | None = None
    """Channel that gets a copy when ``status`` is DEAD."""
    halt: bool = False
    """When DEAD: halt the schedule's ordering key until it is resumed."""
    tenant: str = ""
    """The schedule's tenant and channel: the labels of the delivery counters."""
    channel: str = ""
    events: str | None = None
    """The channel (of the same tenant) that gets an outcome event when the status is final
    (and, with ``every_attempt``, after a retried attempt too)."""
    every_attempt: bool = False

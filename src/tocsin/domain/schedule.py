"""Schedules: what a client asked Tocsin to deliver, and when."""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tocsin.domain.defaults import KEY_RETENTION_MS
from tocsin.domain.terms import Terms, terms_json

__all__ = ["NewSchedule", "PayloadKind", "Schedule", "ScheduleOrder", "Status"]


class Status(StrEnum):
    """Where a schedule is in its life."""

    PENDING = "PENDING"
    """Waiting for its due time (or for its next retry)."""
    CLAIMED = "CLAIMED"
    """Taken by a dispatcher epoch and being delivered; too late to cancel."""
    DELIVERED = "DELIVERED"
    """Handed to its channel and acknowledged."""
    CANCELLED = "CANCELLED"
    """Cancelled by the client before it fired; it will never be delivered."""
    DEAD = "DEAD"
    """Every attempt failed, or the channel refused it for good."""
    EXPIRED = "EXPIRED"
    """It would have gone out after its deadline (``expires_at``, ``max_lateness``): never
    sent; ``last_error`` says why. Re-drivable like a dead one."""

    @property
    def final(self) -> bool:
        """True for the states a schedule never leaves (but by a re-drive)."""
        return self in (Status.DELIVERED, Status.CANCELLED, Status.DEAD, Status.EXPIRED)


class PayloadKind(StrEnum):
    """How a payload's bytes are to be read when they are handed to a channel."""

    JSON = "json"
    """UTF-8 JSON text; channels that speak JSON embed it as a value."""
    TEXT = "text"
    """UTF-8 text."""
    BINARY = "binary"
    """Opaque bytes; JSON envelopes carry them base64-encoded."""


class ScheduleOrder(StrEnum):
    """How a list of schedules is sorted."""

    ID = "id"
    """Creation order (ids sort by creation time), the oldest first: the API's pages, which
    go on after the last id seen."""
    DUE = "due"
    """Due time, the latest first: tonight's pending schedules above a minute ago's
    deliveries."""
    ACTIVITY = "activity"
    """Newest activity first: when it was delivered, else last claimed, else created."""


def payload_value(kind: PayloadKind, payload: bytes) -> dict[str, Any]:
    """The payload as it appears in a JSON envelope: ``payload``, or ``payload_base64``."""
    if kind is PayloadKind.JSON:
        return {"payload": json.loads(payload)}
    if kind is PayloadKind.TEXT:
        return {"payload": payload.decode("utf-8")}
    return {"payload_base64": base64.b64encode(payload).decode("ascii")}


@dataclass(frozen=True, kw_only=True, slots=True)
class NewSchedule:
    """A validated request to deliver ``payload`` to ``channel`` at ``due_ms``."""

    channel: str
    payload: bytes
    payload_kind: PayloadKind = PayloadKind.JSON
    headers: dict[str, str] = field(default_factory=dict)
    due_ms: int
    tenant: str = "default"
    key: str | None = None
    ordering_key: str | None = None
    overwrite_pending: bool = False
    """Task-key semantics for ``key``: a repeat overwrites payload and headers while the
    schedule is PENDING, and is a no-op answering the completed schedule for
    ``key_retention_ms`` after it completed. Without it ``key`` is an idempotency key: a
    repeat with a different request is a conflict."""
    key_retention_ms: int = KEY_RETENTION_MS
    request_digest: str | None = None
    """A digest of the client's request as sent (so a repeat with ``delay`` matches);
    when absent, :meth:`fingerprint` digests the content."""
    policy: str | None = None
    """The throttling policy whose tokens its deliveries take (see :class:`Policy`)."""
    id: str | None = None
    """A caller-chosen id (a recurring firing's deterministic id); None: the store makes one."""
    recurring_id: str | None = None
    """The recurring schedule whose firing this message is."""
    firing_ms: int | None = None
    """That firing's instant."""
    terms: Terms | None = None
    """Its delivery terms (expiry, retry policy); None: its channel's."""
    labels: dict[str, str] = field(default_factory=dict)
    """Bounded ``key=value`` pairs to find it by (:mod:`tocsin.domain.labels`)."""

    def fingerprint(self) -> str:
        """A digest of the request, to tell a true repeat from a key reused."""
        if self.request_digest is not None:
            return self.request_digest
        digest = hashlib.sha256()
        for part in (self.tenant, self.channel, self.payload_kind.value, str(self.due_ms),
                     self.ordering_key or "", self.policy or "",
                     json.dumps(self.headers, sort_keys=True)):
            digest.update(part.encode())
            digest.update(b"\0")
        if (terms := terms_json(self.terms)) is not None:
            digest.update(terms.encode())
            digest.update(b"\0")
        if self.labels:  # absent for none: digests from before labels stay the same
            digest.update(json.dumps(self.labels, sort_keys=True).encode() + b"\0")
        digest.update(self.payload)
        return digest.hexdigest()


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """A stored schedule, as the store knows it now."""

    id: str
    tenant: str
    channel: str
    payload: bytes
    payload_kind: PayloadKind
    headers: dict[str, str]
    due_ms: int
    bucket: int
    status: Status
    attempts: int
    created_ms: int
    key: str | None = None
    ordering_key: str | None = None
    next_ms: int | None = None
    policy: str | None = None
    recurring_id: str | None = None
    claim_epoch: int | None = None
    claimed_ms: int | None = None
    delivered_ms: int | None = None
    last_error: str | None = None
    terms: Terms | None = None
    """Its delivery terms as given (None: its channel's)."""
    labels: dict[str, str] = field(default_factory=dict)
    """Its labels (:mod:`tocsin.domain.labels`)."""

    @property
    def lateness_ms(self) -> int | None:
        """How long after its due time it was delivered (None until delivered)."""
        return None if self.delivered_ms is None else self.delivered_ms - self.due_ms

"""The answers of the Tocsin API as typed dicts: plain JSON values, ready to print or store."""

from __future__ import annotations

from typing import Any, NotRequired, TypedDict

__all__ = [
    "ApiKeyInfo",
    "ChannelInfo",
    "ChannelTest",
    "Created",
    "DeliveryInfo",
    "Fired",
    "Firing",
    "FiringTime",
    "HaltedKey",
    "PausedInfo",
    "PolicyInfo",
    "Readiness",
    "RecurringInfo",
    "RecurringPage",
    "Released",
    "ScheduleInfo",
    "TenantInfo",
]


class Created(TypedDict):
    """The answer for one schedule created (or found again by its key)."""

    id: str
    status: str
    due_at: str
    """RFC 3339, UTC, with ``Z``."""
    bucket: int
    created: bool
    """False when ``key`` matched an existing schedule with the same request."""


class ScheduleInfo(TypedDict):
    """A schedule as the API reports it. Exactly one of ``payload``, ``payload_text`` and
    ``payload_base64`` is present: the form it was given in."""

    id: str
    tenant: str
    channel: str
    status: str
    due_at: str
    created_at: str
    attempts: int
    last_error: str | None
    next_attempt_at: str | None
    delivered_at: str | None
    lateness_ms: int | None
    headers: dict[str, str]
    key: str | None
    ordering_key: str | None
    bucket: int
    expires_at: str | None
    max_lateness: float | None
    """Seconds."""
    retry: dict[str, Any] | None
    """Its own retry policy's overrides (durations in seconds)."""
    body: str | None
    """Its body's format (None: the channel's)."""
    method: str | None
    path: str | None
    retry_policy: NotRequired[dict[str, Any]]
    """The policy its failures follow: its own over its channel's over the dispatcher's
    (``GET /v1/schedules/{id}``)."""
    payload: NotRequired[Any]
    payload_text: NotRequired[str]
    payload_base64: NotRequired[str]


class DeliveryInfo(TypedDict):
    """One delivery attempt."""

    delivery_id: str
    attempt: int
    epoch: int
    started_at: str
    ended_at: str
    outcome: str
    """delivered, retry, rejected or expired."""
    error: str | None
    lateness_ms: int


class ChannelInfo(TypedDict):
    """A registered channel (of ``tenant``: names are per tenant)."""

    name: str
    tenant: str
    kind: str
    config: dict[str, Any]


class ChannelTest(TypedDict):
    """What came of a channel's test message (``tocsin channels test``)."""

    tenant: str
    channel: str
    kind: str
    delivery_id: str
    """``test-<id>-1``: a consumer can tell a test message by it."""
    outcome: str
    """``delivered``, ``retry`` or ``rejected``."""
    delivered: bool
    error: str | None
    took_ms: int


class Readiness(TypedDict):
    """``/readyz``: ``status`` is ``ready`` or ``unready``, with the ``problems``."""

    status: str
    problems: list[str]


class HaltedKey(TypedDict):
    """An ordering key and whether it is halted (by a dead schedule, channel ``on_dead: halt``)."""

    tenant: str
    ordering_key: str
    halted: bool


class PausedInfo(TypedDict):
    """A channel's pause state: ``paused`` (with ``paused_at``), or resumed (``was_paused``)."""

    tenant: str
    name: str
    paused: bool
    paused_at: NotRequired[str]
    was_paused: NotRequired[bool]


class Fired(TypedDict, total=False):
    """What a trigger or a backfill of a recurring schedule fired."""

    id: str
    firing_at: str
    firing_id: str
    firings: int
    messages: int
    already: int


class RecurringInfo(TypedDict):
    """A recurring schedule, with its ``state`` (ACTIVE, PAUSED, ENDED) and next firing. Exactly
    one of ``payload``, ``payload_text`` and ``payload_base64`` is present."""

    id: str
    tenant: str
    cron: str | None
    """The cron rule, or None for an interval rule."""
    every: str | None
    """The interval (ISO 8601), or None for a cron rule."""
    anchor: str | None
    """The instant the interval counts from."""
    jitter: float
    """Seconds each firing's messages may be due after it."""
    timezone: str
    start: str | None
    end: str | None
    channel: str
    headers: dict[str, str]
    count: int
    stagger: float
    misfire: str
    misfire_grace: float
    policy: str | None
    paused: bool
    state: str
    revision: int
    next_firing_at: str | None
    expanded_until: str | None
    created_at: str
    updated_at: str
    payload: NotRequired[Any]
    payload_text: NotRequired[str]
    payload_base64: NotRequired[str]


class RecurringPage(TypedDict):
    """One page of recurring schedules; pass ``next_cursor`` back for the next one."""

    items: list[RecurringInfo]
    next_cursor: str | None


class FiringTime(TypedDict):
    """A firing ahead, in the schedule's zone and in UTC (RFC 3339)."""

    local: str
    utc: str


class Firing(TypedDict):
    """A firing so far: ``outcome`` expanded (``messages`` by status) or skipped (``reason``)."""

    firing_at: str
    outcome: str
    reason: str | None
    due_at: str | None
    messages: dict[str, int]


class PolicyInfo(TypedDict):
    """A throttling policy (of ``tenant``); ``in_flight`` is the tokens held now."""

    name: str
    tenant: str
    max_in_flight: int
    rate: float | None
    token_lease: float
    in_flight: NotRequired[int]


class TenantInfo(TypedDict):
    """A tenant's settings; ``configured`` is false for the defaults of a tenant never set."""

    name: str
    durability: str
    weight: int
    events: str | None
    """The channel that gets the outcome events of its channels that name none."""
    configured: bool


class ApiKeyInfo(TypedDict):
    """An API key; ``token`` only in the answer to its creation (shown that once)."""

    id: str
    role: str
    """``admin`` or ``tenant``."""
    tenant: str | None
    read_only: bool
    name: str | None
    created_at: str
    revoked_at: str | None
    token: NotRequired[str]


class Released(TypedDict):
    """The answer to a token release."""

    delivery_id: str
    released: bool

"""The one request builder of both clients: each API method as a function of its arguments
to a :class:`Call` (method, path, query, JSON body), and each answer back to a value or to
Tocsin's error (:func:`tocsin.errors.error_from`, the API's own status table read backwards).

:class:`tocsin.client.Client` sends a call and returns its value;
:class:`tocsin.client.AsyncClient` sends it and awaits it. Nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, Literal, TypeVar, Unpack, cast
from urllib.parse import quote

from tocsin.client.answers import (
    ApiKeyInfo,
    ChannelInfo,
    ChannelTest,
    Created,
    DeliveryInfo,
    Fired,
    Firing,
    FiringTime,
    HaltedKey,
    PausedInfo,
    PolicyInfo,
    Readiness,
    RecurringInfo,
    RecurringPage,
    Released,
    ScheduleInfo,
    TenantInfo,
)
from tocsin.client.bodies import (
    UNSET,
    RecurringFields,
    Retry,
    Span,
    change_body,
    instant,
    policy_body,
    recurring_body,
    schedule_body,
)
from tocsin.errors import error_from

__all__ = ["Call", "Page"]

T = TypeVar("T")
Page = dict[str, Any]
"""A page of schedules: ``{"items": [...], "next_cursor": ...}``."""


def _body(content: bytes, json: Callable[[], Any]) -> Any:
    try:
        return json() if content else None
    except ValueError:
        return None


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request, and how its answer becomes a value: the answer's ``pick`` key, or the whole
    JSON body (``None`` when empty); ``answers`` lists error statuses whose body is an answer."""

    method: str
    path: str
    params: dict[str, Any] | None = None
    json: Any = None
    pick: str | None = None
    answers: frozenset[int] = frozenset()

    def value(self, status: int, content: bytes, json: Callable[[], Any], text: str = "") -> T:
        """The value of an answer (``json`` parses its body), or raise the error it stands for."""
        body = _body(content, json)
        answer = status in self.answers and isinstance(body, dict) and "error" not in body
        if status >= 400 and not answer:
            raise error_from(status, body, path=self.path, text=text)
        return cast(T, body[self.pick] if self.pick and body is not None else body)


def _path(prefix: str, *parts: str) -> str:
    return "/".join([prefix, *(quote(p, safe="") for p in parts)])


def _schedules(*parts: str) -> str:
    return _path("/v1/schedules", *parts)


def _recurring(*parts: str) -> str:
    return _path("/v1/recurring", *parts)


# Schedules

def schedule(channel: str, payload: Any = UNSET, *, payload_text: str | None = None,
             payload_base64: str | None = None, due_at: datetime | str | None = None,
             delay: Span | None = None, headers: Mapping[str, str] | None = None,
             key: str | None = None, tenant: str | None = None,
             ordering_key: str | None = None, uniqueness_key: str | None = None,
             key_mode: Literal["idempotent", "task"] | None = None,
             policy: str | None = None, expires_at: datetime | str | None = None,
             max_lateness: Span | None = None, retry: Retry | None = None,
             body: str | None = None, method: str | None = None,
             path: str | None = None,
             labels: Mapping[str, str] | None = None) -> Call[Created]:
    """Schedule one message: one of ``payload`` (any JSON value), ``payload_text`` or
    ``payload_base64``; one of ``due_at`` (aware datetime or RFC 3339) or ``delay``
    (seconds, timedelta or ISO 8601 like ``PT5M``). ``expires_at``, ``max_lateness``: not
    sent from then on (it becomes EXPIRED); ``retry``: its retry policy's overrides;
    ``body``: ``envelope``, ``raw``, ``cloudevents_binary`` or ``cloudevents_structured``;
    ``method`` and ``path``: a webhook's method and a path and query after its URL;
    ``labels``: key=value pairs to find it by."""
    request = schedule_body(channel, payload, payload_text=payload_text,
                            payload_base64=payload_base64, due_at=due_at, delay=delay,
                            headers=headers, key=key, tenant=tenant,
                            ordering_key=ordering_key, uniqueness_key=uniqueness_key,
                            key_mode=key_mode, policy=policy, expires_at=expires_at,
                            max_lateness=max_lateness, retry=retry, body=body,
                            method=method, path=path, labels=labels)
    return Call("POST", "/v1/schedules", json=request)


def schedule_many(items: Iterable[Mapping[str, Any]]) -> Call[list[Created]]:
    """Schedule a batch, all or nothing; each item has :meth:`schedule`'s arguments as
    keys (``{"channel": ..., "payload": ..., "delay": ...}``)."""
    return Call("POST", "/v1/schedules", json={"schedules": [
        schedule_body(**item) for item in items]}, pick="schedules")


def get(schedule_id: str) -> Call[ScheduleInfo]:
    """One schedule."""
    return Call("GET", _schedules(schedule_id))


def list_page(*, status: str | None = None, channel: str | None = None,
              due_from: datetime | str | None = None, due_to: datetime | str | None = None,
              page_size: int = 100, cursor: str | None = None,
              key: str | None = None, label: str | None = None) -> Call[Page]:
    """One page of the schedules matching the filters (``label``: a label selector,
    ``k=v[,k2=v2]``), in id order."""
    params: dict[str, Any] = {"limit": page_size}
    for name, value in (("status", status), ("channel", channel), ("cursor", cursor),
                        ("key", key), ("label", label)):
        if value is not None:
            params[name] = value
    for name, when in (("due_from", due_from), ("due_to", due_to)):
        if when is not None:
            params[name] = instant(when, name)
    return Call("GET", "/v1/schedules", params=params)


def next_page(call: Call[Page], page: Page) -> Call[Page] | None:
    """The call for the page after ``page`` (fetched by ``call``), or None after the last."""
    cursor = page["next_cursor"]
    return Call(call.method, call.path, {**(call.params or {}), "cursor": cursor}) if cursor \
        else None


def cancel(schedule_id: str) -> Call[ScheduleInfo]:
    """Cancel: the answer's status is CANCELLED (it will never be delivered), or
    :class:`ConflictError` with the ``status`` when it is too late."""
    return Call("DELETE", _schedules(schedule_id))


def reschedule(schedule_id: str, *, due_at: datetime | str | None = None,
               delay: Span | None = None, payload: Any = UNSET,
               payload_text: str | None = None, payload_base64: str | None = None,
               headers: Mapping[str, str] | None = None) -> Call[ScheduleInfo]:
    """Change a PENDING schedule (what is given); :class:`ConflictError` with the ``status``
    when it is too late."""
    return Call("PATCH", _schedules(schedule_id), json=change_body(
        due_at=due_at, delay=delay, payload=payload, payload_text=payload_text,
        payload_base64=payload_base64, headers=headers))


def deliveries(schedule_id: str) -> Call[list[DeliveryInfo]]:
    """The attempt log of one schedule, oldest first."""
    return Call("GET", _schedules(schedule_id, "deliveries"), pick="items")


def halted_keys(tenant: str | None = None) -> Call[list[HaltedKey]]:
    """The ordering keys halted by a dead schedule."""
    params = {"halted": "true", **({"tenant": tenant} if tenant else {})}
    return Call("GET", "/v1/ordering-keys", params=params, pick="items")


def resume_key(ordering_key: str, tenant: str | None = None) -> Call[HaltedKey]:
    """Resume a halted ordering key of the key's tenant (an admin key: of ``tenant``, default
    ``default``)."""
    return Call("POST", _path("/v1/ordering-keys", ordering_key, "resume"),
                params={"tenant": tenant} if tenant else None)


def redrive(schedule_id: str) -> Call[ScheduleInfo]:
    """Send a DEAD schedule again, as a new attempt chain (:class:`ConflictError` with the
    ``status`` unless it is DEAD)."""
    return Call("POST", _schedules(schedule_id, "redrive"))


def redrive_dead(*, channel: str | None = None, tenant: str | None = None,
                 due_from: datetime | str | None = None, due_to: datetime | str | None = None,
                 limit: int = 10_000,
                 status: Literal["DEAD", "EXPIRED"] = "DEAD",
                 label: str | None = None) -> Call[int]:
    """Send again up to ``limit`` DEAD (or ``status="EXPIRED"``) schedules matching the
    filters (``label``: a label selector); how many were."""
    body: dict[str, Any] = {"limit": limit, "status": status}
    for name, value in (("channel", channel), ("tenant", tenant), ("label", label)):
        if value is not None:
            body[name] = value
    for name, when in (("due_from", due_from), ("due_to", due_to)):
        if when is not None:
            body[name] = instant(when, name)
    return Call("POST", _schedules("redrive"), json=body, pick="redriven")


# Channels

def pause_channel(name: str, tenant: str | None = None) -> Call[PausedInfo]:
    """Pause a channel: its schedules wait until it is resumed."""
    return Call("POST", _path("/v1/channels", name, "pause"),
                params={"tenant": tenant} if tenant else None)


def resume_channel(name: str, tenant: str | None = None) -> Call[PausedInfo]:
    """Resume a paused channel."""
    return Call("POST", _path("/v1/channels", name, "resume"),
                params={"tenant": tenant} if tenant else None)


def status() -> Call[dict[str, Any]]:
    """The one-screen summary: health, backlog, due next hour, dead, halted keys, paused
    channels (of the key's tenant)."""
    return Call("GET", "/v1/status")


def paused_channels() -> Call[list[PausedInfo]]:
    """The paused channels."""
    return Call("GET", "/v1/paused-channels", pick="items")


def add_channel(name: str, kind: str, config: Mapping[str, Any]) -> Call[ChannelInfo]:
    """Register or replace a channel (the server checks ``config`` for its ``kind``)."""
    return Call("POST", "/v1/channels", json={"name": name, "kind": kind,
                                              "config": dict(config)})


def test_channel(name: str, tenant: str | None = None) -> Call[ChannelTest]:
    """Send one marked test message through a channel now; what came of it."""
    return Call("POST", _path("/v1/channels", name, "test"),
                params={"tenant": tenant} if tenant else None)


def channels() -> Call[list[ChannelInfo]]:
    """Every registered channel."""
    return Call("GET", "/v1/channels", pick="items")


def delete_channel(name: str) -> Call[None]:
    """Forget a channel."""
    return Call("DELETE", _path("/v1/channels", name))


def health() -> Call[Readiness]:
    """``/readyz``: ready, or unready with the problems (an answer, not an error)."""
    return Call("GET", "/readyz", answers=frozenset({503}))


# Recurring schedules

def add_recurring(cron: str | None, channel: str, payload: Any = UNSET,
                  **fields: Unpack[RecurringFields]) -> Call[RecurringInfo]:
    """Create a recurring schedule: ``cron`` (5 fields, or 6 with seconds) read in
    ``timezone`` (IANA, default UTC), or ``cron=None`` and ``every`` (an interval of absolute
    time from ``anchor``); ``count`` messages per firing spread over ``stagger``, each firing
    up to ``jitter`` late; the other :class:`~tocsin.client.bodies.RecurringFields`."""
    return Call("POST", "/v1/recurring", json=recurring_body(
        cron=cron, channel=channel, payload=payload, **fields))


def get_recurring(recurring_id: str) -> Call[RecurringInfo]:
    """One recurring schedule, with its state and next firing."""
    return Call("GET", _recurring(recurring_id))


def list_recurring(*, tenant: str | None = None, cursor: str | None = None,
                   limit: int = 100) -> Call[RecurringPage]:
    """One page: ``{"items": [...], "next_cursor": ...}``."""
    params: dict[str, Any] = {"limit": limit}
    params.update({k: v for k, v in (("tenant", tenant), ("cursor", cursor)) if v})
    return Call("GET", "/v1/recurring", params=params)


def update_recurring(recurring_id: str, *, cron: str | None = None,
                     channel: str | None = None, payload: Any = UNSET,
                     **fields: Unpack[RecurringFields]) -> Call[RecurringInfo]:
    """Change any of :meth:`add_recurring`'s fields; firings still ahead follow it."""
    return Call("PATCH", _recurring(recurring_id), json=recurring_body(
        cron=cron, channel=channel, payload=payload, **fields))


def pause_recurring(recurring_id: str) -> Call[RecurringInfo]:
    """Pause: firings are skipped (and recorded so) until resumed."""
    return Call("POST", _recurring(recurring_id, "pause"))


def resume_recurring(recurring_id: str) -> Call[RecurringInfo]:
    """Resume from now on."""
    return Call("POST", _recurring(recurring_id, "resume"))


def trigger_recurring(recurring_id: str) -> Call[Fired]:
    """Fire once now: a firing of its own, its messages due now."""
    return Call("POST", _recurring(recurring_id, "trigger"))


def backfill_recurring(recurring_id: str, start: str, end: str) -> Call[Fired]:
    """Fire each firing in ``[start, end)`` (RFC 3339, in the past) that the store holds no
    message of, once, due now."""
    return Call("POST", _recurring(recurring_id, "backfill"), json={"from": start, "to": end})


def delete_recurring(recurring_id: str) -> Call[None]:
    """Delete; its firings still ahead are cancelled."""
    return Call("DELETE", _recurring(recurring_id))


def next_firings(recurring_id: str, n: int = 10) -> Call[list[FiringTime]]:
    """The next ``n`` firings, each ``{"local": ..., "utc": ...}``."""
    return Call("GET", _recurring(recurring_id, "next"), params={"n": n}, pick="items")


def firings(recurring_id: str, *, after: datetime | str | None = None,
            limit: int = 100) -> Call[list[Firing]]:
    """The firings so far: expanded (messages by status) or skipped, with the reason."""
    params: dict[str, Any] = {"limit": limit}
    if after is not None:
        params["after"] = instant(after, "after")
    return Call("GET", _recurring(recurring_id, "firings"), params=params, pick="items")


# Policies and tenants

def add_policy(name: str, max_in_flight: int, *, rate: float | None = None,
               token_lease: Span | None = None) -> Call[PolicyInfo]:
    """Register or change a throttling policy."""
    return Call("POST", "/v1/policies", json=policy_body(name, max_in_flight, rate=rate,
                                                         token_lease=token_lease))


def policies() -> Call[list[PolicyInfo]]:
    """Every policy, with the tokens held now (``in_flight``)."""
    return Call("GET", "/v1/policies", pick="items")


def get_policy(name: str) -> Call[PolicyInfo]:
    """One policy, with the tokens held now."""
    return Call("GET", _path("/v1/policies", name))


def delete_policy(name: str) -> Call[None]:
    """Forget a policy (:class:`ConflictError` while schedules wait on it)."""
    return Call("DELETE", _path("/v1/policies", name))


def set_tenant(name: str, *, durability: Literal["strict", "relaxed"] = "strict",
               events: str | None = None) -> Call[TenantInfo]:
    """Configure a tenant: ``durability`` of its creates (strict is the default), its
    ``events`` channel (outcome events of its channels that name none)."""
    body: dict[str, Any] = {"durability": durability}
    if events is not None:
        body["events"] = events
    return Call("PUT", _path("/v1/tenants", name), json=body)


def get_tenant(name: str) -> Call[TenantInfo]:
    """A tenant's settings (the defaults, ``configured: false``, if never set)."""
    return Call("GET", _path("/v1/tenants", name))


def release(delivery_id: str) -> Call[Released]:
    """Hand back the policy token of a delivery (its ``Tocsin-Delivery-Id``);
    :class:`NotFoundError` when it holds none."""
    return Call("POST", _path("/v1/deliveries", delivery_id, "release"))


# API keys (admin keys only)

def create_key(role: Literal["admin", "tenant"], *, tenant: str | None = None,
               read_only: bool = False, name: str | None = None) -> Call[ApiKeyInfo]:
    """Create an API key; the answer's ``token`` is shown this once."""
    return Call("POST", "/v1/apikeys", json={"role": role, "tenant": tenant,
                                             "read_only": read_only, "name": name})


def keys(*, tenant: str | None = None) -> Call[list[ApiKeyInfo]]:
    """Every API key (never a token), or one tenant's."""
    return Call("GET", "/v1/apikeys", params={"tenant": tenant} if tenant else None,
                pick="items")


def audit(*, tenant: str | None = None, key_id: str | None = None, action: str | None = None,
          since: str | None = None, until: str | None = None, cursor: str | None = None,
          limit: int = 100) -> Call[dict[str, Any]]:
    """A page of the audit log (admin keys only): ``items`` and ``next_cursor``."""
    given = {"tenant": tenant, "key_id": key_id, "action": action, "since": since,
             "until": until, "cursor": cursor, "limit": limit}
    return Call("GET", "/v1/audit", params={k: v for k, v in given.items() if v is not None})


def revoke_key(key_id: str) -> Call[ApiKeyInfo]:
    """Revoke an API key: it answers 401 from now on."""
    return Call("DELETE", _path("/v1/apikeys", key_id))

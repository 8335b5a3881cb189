"""The JSON bodies the clients send: only what is given; the server checks the rules.

Naive datetimes are refused here, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal, TypedDict, Unpack

from tocsin.errors import ValidationError

__all__ = [
    "UNSET",
    "RecurringFields",
    "Retry",
    "change_body",
    "instant",
    "policy_body",
    "recurring_body",
    "retry_value",
    "schedule_body",
    "span",
]


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()
"""Marks ``payload`` as not given (``None`` is a JSON payload: ``null``)."""

Span = float | timedelta | str
"""A duration: seconds, a timedelta, or ISO 8601 (``PT5M``)."""


class Retry(TypedDict, total=False):
    """A retry policy's overrides (``retry`` of a schedule, a recurring one or a channel's
    config): what is not given is the level below's."""

    max_attempts: int
    base: Span
    """The first retry's back-off ceiling."""
    cap: Span
    """The longest back-off."""
    multiplier: float
    """How much the ceiling grows per retry (default 2)."""
    jitter: float
    """The share of the ceiling drawn at random, 0 to 1 (default 0.5)."""
    max_retry_duration: Span
    """No retry later than this long after the first attempt."""


def retry_value(retry: Mapping[str, Any]) -> dict[str, Any]:
    """A retry policy's overrides as the API takes them (durations as :func:`span`)."""
    return {k: span(v) if k in ("base", "cap", "max_retry_duration") else v
            for k, v in retry.items() if v is not None}


def instant(value: datetime | str, field: str) -> str:
    """An aware datetime as RFC 3339 (a string is sent as given); naive ones are refused."""
    if isinstance(value, datetime):
        if value.tzinfo is None or value.utcoffset() is None:
            raise ValidationError(field, "naive datetime: give it a time zone (e.g. tzinfo=UTC)")
        return value.isoformat()
    return value


def span(value: Span) -> float | str:
    """A duration as the API takes it: seconds, or the ISO 8601 string as given."""
    return value.total_seconds() if isinstance(value, timedelta) else value


def _given(target: dict[str, Any], /, **fields: Any) -> dict[str, Any]:
    target.update({name: value for name, value in fields.items() if value is not None})
    return target


def _timing(due_at: datetime | str | None, delay: Span | None) -> dict[str, Any]:
    return _given({}, due_at=None if due_at is None else instant(due_at, "due_at"),
                  delay=None if delay is None else span(delay))


def _payload(payload: Any) -> dict[str, Any]:
    return {} if payload is UNSET else {"payload": payload}


def schedule_body(channel: str, payload: Any = UNSET, *, payload_text: str | None = None,
                  payload_base64: str | None = None, due_at: datetime | str | None = None,
                  delay: Span | None = None, headers: Mapping[str, str] | None = None,
                  key: str | None = None, tenant: str | None = None,
                  ordering_key: str | None = None, uniqueness_key: str | None = None,
                  key_mode: Literal["idempotent", "task"] | None = None,
                  policy: str | None = None, expires_at: datetime | str | None = None,
                  max_lateness: Span | None = None, retry: Retry | None = None,
                  body: str | None = None, method: str | None = None,
                  path: str | None = None,
                  labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON body of one schedule."""
    out = {"channel": channel, **_payload(payload)}
    _given(out, payload_text=payload_text, payload_base64=payload_base64)
    out.update(_timing(due_at, delay))
    if headers:
        out["headers"] = dict(headers)
    if labels:
        out["labels"] = dict(labels)
    _given(out, expires_at=None if expires_at is None else instant(expires_at, "expires_at"),
           max_lateness=None if max_lateness is None else span(max_lateness),
           retry=None if retry is None else retry_value(retry), body=body, method=method,
           path=path)
    return _given(out, key=key, tenant=tenant, ordering_key=ordering_key,
                  uniqueness_key=uniqueness_key, key_mode=key_mode, policy=policy)


def change_body(*, due_at: datetime | str | None = None, delay: Span | None = None,
                payload: Any = UNSET, payload_text: str | None = None,
                payload_base64: str | None = None,
                headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON body of a reschedule (only what changes)."""
    body = {**_timing(due_at, delay), **_payload(payload)}
    return _given(body, payload_text=payload_text, payload_base64=payload_base64,
                  headers=None if headers is None else dict(headers))


class RecurringFields(TypedDict, total=False):
    """The fields of a recurring schedule besides its rule, channel and payload (see
    ``POST /v1/recurring``); each is optional."""

    payload_text: str | None
    payload_base64: str | None
    timezone: str | None
    """IANA zone the rule is read in (default UTC)."""
    every: Span | None
    """Instead of ``cron``: an interval of absolute time."""
    anchor: datetime | str | None
    """The instant ``every`` counts from."""
    jitter: Span | None
    """Each firing's messages due up to this much later."""
    count: int | None
    """Messages per firing."""
    stagger: Span | None
    """Spread a firing's messages over this window."""
    start: datetime | str | None
    end: datetime | str | None
    misfire: Literal["fire_once", "fire_all", "skip"] | None
    misfire_grace: Span | None
    policy: str | None
    headers: Mapping[str, str] | None
    tenant: str | None
    paused: bool | None
    max_lateness: Span | None
    """A firing's message is not sent this late or later (it expires)."""
    retry: Retry | None
    """Each firing's retry policy."""
    labels: Mapping[str, str] | None
    """Key=value pairs its firings carry."""


def recurring_body(*, cron: str | None = None, channel: str | None = None,
                   payload: Any = UNSET, **fields: Unpack[RecurringFields]) -> dict[str, Any]:
    """The JSON body of a recurring schedule, or of a change to one (only what is given)."""
    body = _given({**_payload(payload)}, cron=cron, channel=channel)
    for name, value in fields.items():
        if value is None:
            continue
        if name == "retry":
            value = retry_value(value)  # type: ignore[arg-type]
        elif name in ("stagger", "misfire_grace", "every", "jitter", "max_lateness"):
            value = span(value)  # type: ignore[arg-type]
        elif name in ("start", "end", "anchor"):
            value = instant(value, name)  # type: ignore[arg-type]
        elif name in ("headers", "labels"):
            value = dict(value)  # type: ignore[call-overload]
        body[name] = value
    return body


def policy_body(name: str, max_in_flight: int, *, rate: float | None = None,
                token_lease: Span | None = None) -> dict[str, Any]:
    """The JSON body of a throttling policy."""
    return _given({"name": name, "max_in_flight": max_in_flight}, rate=rate,
                  token_lease=None if token_lease is None else span(token_lease))

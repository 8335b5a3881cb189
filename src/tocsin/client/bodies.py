"""The JSON bodies the clients send: only what is given; the server checks the rules.

Naive datetimes are refused here, before anything is sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Literal

from tocsin.errors import ValidationError

__all__ = [
    "UNSET",
    "change_body",
    "instant",
    "policy_body",
    "recurring_body",
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


def _given(body: dict[str, Any], **fields: Any) -> dict[str, Any]:
    body.update({name: value for name, value in fields.items() if value is not None})
    return body


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
                  policy: str | None = None) -> dict[str, Any]:
    """The JSON body of one schedule."""
    body = {"channel": channel, **_payload(payload)}
    _given(body, payload_text=payload_text, payload_base64=payload_base64)
    body.update(_timing(due_at, delay))
    if headers:
        body["headers"] = dict(headers)
    return _given(body, key=key, tenant=tenant, ordering_key=ordering_key,
                  uniqueness_key=uniqueness_key, key_mode=key_mode, policy=policy)


def change_body(*, due_at: datetime | str | None = None, delay: Span | None = None,
                payload: Any = UNSET, payload_text: str | None = None,
                payload_base64: str | None = None,
                headers: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The JSON body of a reschedule (only what changes)."""
    body = {**_timing(due_at, delay), **_payload(payload)}
    return _given(body, payload_text=payload_text, payload_base64=payload_base64,
                  headers=None if headers is None else dict(headers))


def recurring_body(*, cron: str | None = None, channel: str | None = None,
                   payload: Any = UNSET, payload_text: str | None = None,
                   payload_base64: str | None = None, timezone: str | None = None,
                   count: int | None = None, stagger: Span | None = None,
                   start: datetime | str | None = None, end: datetime | str | None = None,
                   misfire: Literal["fire_once", "fire_all", "skip"] | None = None,
                   misfire_grace: Span | None = None, policy: str | None = None,
                   headers: Mapping[str, str] | None = None, tenant: str | None = None,
                   paused: bool | None = None) -> dict[str, Any]:
    """The JSON body of a recurring schedule, or of a change to one (only what is given)."""
    body = _payload(payload)
    _given(body, cron=cron, channel=channel, payload_text=payload_text,
           payload_base64=payload_base64, timezone=timezone, count=count, misfire=misfire,
           policy=policy, tenant=tenant, paused=paused,
           headers=None if headers is None else dict(headers))
    _given(body, stagger=None if stagger is None else span(stagger),
           misfire_grace=None if misfire_grace is None else span(misfire_grace))
    return _given(body, start=None if start is None else instant(start, "start"),
                  end=None if end is None else instant(end, "end"))


def policy_body(name: str, max_in_flight: int, *, rate: float | None = None,
                token_lease: Span | None = None) -> dict[str, Any]:
    """The JSON body of a throttling policy."""
    return _given({"name": name, "max_in_flight": max_in_flight}, rate=rate,
                  token_lease=None if token_lease is None else span(token_lease))

"""The client's calls for bulk changes by predicate and the live figures (built like
:mod:`tocsin.client.calls`, and sent by both clients)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any, TypedDict

from tocsin.client.bodies import Span, instant, span
from tocsin.client.calls import Call

__all__ = ["BulkAnswer", "ChannelFigures", "cancel_where", "reschedule_where", "stats"]


class BulkAnswer(TypedDict, total=False):
    """What a bulk change came to: ``matched``, ``cancelled`` or ``rescheduled``, ``too_late``
    (already firing: left alone) and ``more`` (the limit was reached: call again)."""

    matched: int
    cancelled: int
    rescheduled: int
    too_late: int
    more: bool


class ChannelFigures(TypedDict):
    """One channel's live figures (``GET /v1/stats``)."""

    tenant: str
    channel: str
    pending: int
    due_soon: int
    delivered: int
    dead: int
    cancelled: int
    retried: int
    lateness_ms: dict[str, int] | None


def _selection(*, channel: str | None, tenant: str | None, key_prefix: str | None,
               ordering_key: str | None, recurring_id: str | None,
               due_from: datetime | str | None, due_to: datetime | str | None,
               limit: int, label: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"limit": limit}
    for name, value in (("channel", channel), ("tenant", tenant), ("key_prefix", key_prefix),
                        ("ordering_key", ordering_key), ("recurring_id", recurring_id),
                        ("label", label)):
        if value is not None:
            body[name] = value
    for name, when in (("due_from", due_from), ("due_to", due_to)):
        if when is not None:
            body[name] = instant(when, name)
    return body


def cancel_where(*, channel: str | None = None, tenant: str | None = None,
                 key_prefix: str | None = None, ordering_key: str | None = None,
                 recurring_id: str | None = None, due_from: datetime | str | None = None,
                 due_to: datetime | str | None = None,
                 limit: int = 10_000, label: str | None = None) -> Call[BulkAnswer]:
    """Cancel up to ``limit`` waiting schedules matching every filter given (``label``: a
    label selector, ``k=v[,k2=v2]``)."""
    return Call("POST", "/v1/schedules/cancel", json=_selection(
        channel=channel, tenant=tenant, key_prefix=key_prefix, ordering_key=ordering_key,
        recurring_id=recurring_id, due_from=due_from, due_to=due_to, limit=limit,
        label=label))


def reschedule_where(*, channel: str | None = None, tenant: str | None = None,
                     key_prefix: str | None = None, ordering_key: str | None = None,
                     recurring_id: str | None = None, due_from: datetime | str | None = None,
                     due_to: datetime | str | None = None, due_at: datetime | str | None = None,
                     delay: Span | None = None, shift: Span | None = None,
                     limit: int = 10_000, label: str | None = None) -> Call[BulkAnswer]:
    """Move up to ``limit`` waiting schedules matching the filters to ``due_at`` (or ``delay``
    from now), or each by ``shift`` (a negative one moves them earlier)."""
    body = _selection(channel=channel, tenant=tenant, key_prefix=key_prefix,
                      ordering_key=ordering_key, recurring_id=recurring_id, due_from=due_from,
                      due_to=due_to, limit=limit, label=label)
    if due_at is not None:
        body["due_at"] = instant(due_at, "due_at")
    if delay is not None:
        body["delay"] = span(delay)
    if shift is not None:
        body["shift"] = span(shift)
    return Call("POST", "/v1/schedules/reschedule", json=body)


def stats(*, window: timedelta | str = "PT1H", ahead: timedelta | str = "PT1H",
          tenant: str | None = None, label: str | None = None) -> Call[list[ChannelFigures]]:
    """The live figures per channel over the last ``window`` (due soon: within ``ahead``);
    ``label``: a selector ``k=v[,k2=v2]``, the figures of the schedules carrying it only."""
    params: dict[str, Any] = {"window": span(window), "ahead": span(ahead)}
    if tenant is not None:
        params["tenant"] = tenant
    if label is not None:
        params["label"] = label
    return Call("GET", "/v1/stats", params=params, pick="channels")

"""A schedule's delivery terms: what it asks beyond "this payload, to this channel, at this
time" — when it is too late to send (expiry), how its failures are retried, and how its body is
written (the envelope, the raw payload, a CloudEvent; a webhook's method and path).

Stored as versioned JSON in the schedule's ``terms`` column (None: the channel's and the
dispatcher's defaults alone); a recurring schedule's terms go to each of its firings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tocsin.domain.retry import RetryTerms

__all__ = ["TERMS_VERSION", "BodyFormat", "Terms", "WebhookMethod", "terms_json", "terms_of"]

TERMS_VERSION = 1


class BodyFormat(StrEnum):
    """How a delivery's body is written (channel config ``body``, a schedule's ``body``)."""

    ENVELOPE = "envelope"
    """Tocsin's versioned JSON envelope around the payload (the default)."""
    RAW = "raw"
    """The payload's bytes alone, with the schedule's content type; Tocsin's metadata in the
    transport's headers (``Tocsin-*``)."""
    CLOUDEVENTS_BINARY = "cloudevents_binary"
    """A CloudEvent in binary mode: the payload is the body, the attributes are headers
    (``ce-*``; Kafka ``ce_*``)."""
    CLOUDEVENTS_STRUCTURED = "cloudevents_structured"
    """A CloudEvent in structured mode: ``application/cloudevents+json``, the attributes and
    the data in the body."""


class WebhookMethod(StrEnum):
    """The HTTP method of a webhook delivery (channel config ``method``, a schedule's)."""

    POST = "POST"
    PUT = "PUT"
    PATCH = "PATCH"
    DELETE = "DELETE"


@dataclass(frozen=True, kw_only=True, slots=True)
class Terms:
    """``expires_ms``: not sent at or after this instant; ``max_lateness_ms``: not sent this
    long or more after its due time (the earlier of the two decides; either, when not given,
    is the channel's ``max_lateness``); ``retry``: its retry policy's overrides; ``body``:
    its body's format, ``method`` and ``path`` (appended to a webhook's URL) — each None:
    the channel's."""

    expires_ms: int | None = None
    max_lateness_ms: int | None = None
    retry: RetryTerms | None = None
    body: BodyFormat | None = None
    method: WebhookMethod | None = None
    path: str | None = None

    @property
    def empty(self) -> bool:
        """Whether it asks nothing (stored as NULL)."""
        return (self.expires_ms is None and self.max_lateness_ms is None
                and (self.retry is None or not self.retry.to_json())
                and self.body is None and self.method is None and self.path is None)

    def to_json(self) -> dict[str, Any]:
        """The terms as stored: only what is set, with the format's version."""
        out: dict[str, Any] = {"v": TERMS_VERSION}
        if self.expires_ms is not None:
            out["expires_ms"] = self.expires_ms
        if self.max_lateness_ms is not None:
            out["max_lateness_ms"] = self.max_lateness_ms
        if self.retry is not None and (retry := self.retry.to_json()):
            out["retry"] = retry
        for name in ("body", "method", "path"):
            if (value := getattr(self, name)) is not None:
                out[name] = str(value)
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Terms:
        """:meth:`to_json`'s inverse."""
        retry = value.get("retry")
        body, method = value.get("body"), value.get("method")
        return cls(expires_ms=value.get("expires_ms"),
                   max_lateness_ms=value.get("max_lateness_ms"),
                   retry=RetryTerms.from_json(retry) if retry else None,
                   body=None if body is None else BodyFormat(body),
                   method=None if method is None else WebhookMethod(method),
                   path=value.get("path"))


_ENCODE = json.JSONEncoder(separators=(",", ":"), sort_keys=True).encode
_CACHE: dict[str, Terms] = {}


def terms_json(terms: Terms | None) -> str | None:
    """``terms`` as the ``terms`` column holds them (None when it asks nothing)."""
    return None if terms is None or terms.empty else _ENCODE(terms.to_json())


def terms_of(text: str | None) -> Terms | None:
    """The ``terms`` column's text as :class:`Terms` (None for NULL). Parsed once per distinct
    text: a recurring schedule's firings, or an import's rows, share theirs."""
    if text is None:
        return None
    found = _CACHE.get(text)
    if found is None:
        if len(_CACHE) > 4096:
            _CACHE.clear()
        found = _CACHE[text] = Terms.from_json(json.loads(text))
    return found

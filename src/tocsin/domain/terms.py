"""A schedule's delivery terms: what it asks beyond "this payload, to this channel, at this
time" — when it is too late to send (expiry), and how its failures are retried.

Stored as versioned JSON in the schedule's ``terms`` column (None: the channel's and the
dispatcher's defaults alone); a recurring schedule's terms go to each of its firings.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tocsin.domain.retry import RetryTerms

__all__ = ["TERMS_VERSION", "Terms", "terms_json", "terms_of"]

TERMS_VERSION = 1


@dataclass(frozen=True, kw_only=True, slots=True)
class Terms:
    """``expires_ms``: not sent at or after this instant; ``max_lateness_ms``: not sent this
    long or more after its due time (the earlier of the two decides; either, when not given,
    is the channel's ``max_lateness``); ``retry``: its retry policy's overrides."""

    expires_ms: int | None = None
    max_lateness_ms: int | None = None
    retry: RetryTerms | None = None

    @property
    def empty(self) -> bool:
        """Whether it asks nothing (stored as NULL)."""
        return (self.expires_ms is None and self.max_lateness_ms is None
                and (self.retry is None or not self.retry.to_json()))

    def to_json(self) -> dict[str, Any]:
        """The terms as stored: only what is set, with the format's version."""
        out: dict[str, Any] = {"v": TERMS_VERSION}
        if self.expires_ms is not None:
            out["expires_ms"] = self.expires_ms
        if self.max_lateness_ms is not None:
            out["max_lateness_ms"] = self.max_lateness_ms
        if self.retry is not None and (retry := self.retry.to_json()):
            out["retry"] = retry
        return out

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> Terms:
        """:meth:`to_json`'s inverse."""
        retry = value.get("retry")
        return cls(expires_ms=value.get("expires_ms"),
                   max_lateness_ms=value.get("max_lateness_ms"),
                   retry=RetryTerms.from_json(retry) if retry else None)


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

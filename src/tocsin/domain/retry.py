"""Retry with exponential back-off and jitter: the policy, and a schedule's or a channel's
overrides of it (:class:`RetryTerms`)."""

from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from typing import Any

from tocsin.domain.defaults import MAX_ATTEMPTS, RETRY_BASE_MS, RETRY_CAP_MS

__all__ = ["RETRY_JITTER", "RETRY_MULTIPLIER", "RetryPolicy", "RetryTerms"]

RETRY_MULTIPLIER = 2.0
"""How much each retry's back-off ceiling grows by default (it doubles)."""
RETRY_JITTER = 0.5
"""The default jitter: the wait is drawn from the ceiling's upper half, ``[d/2, d]``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """``max_attempts`` tries; the n-th retry waits a random time in ``[d * (1 - jitter), d]``
    where ``d = min(cap, base * multiplier**(n-1))``; no retry is scheduled later than
    ``max_duration_ms`` after the chain's first attempt (None: no such limit)."""

    base_ms: int = RETRY_BASE_MS
    cap_ms: int = RETRY_CAP_MS
    max_attempts: int = MAX_ATTEMPTS
    multiplier: float = RETRY_MULTIPLIER
    jitter: float = RETRY_JITTER
    max_duration_ms: int | None = None

    def ceiling_ms(self, attempt: int) -> int:
        """The back-off's upper bound after attempt ``attempt`` (1-based) failed."""
        exponent = max(0, attempt - 1)
        if self.multiplier > 1 and exponent > 64:  # any such ceiling is past the cap
            return self.cap_ms
        return int(min(self.cap_ms, self.base_ms * self.multiplier ** exponent))

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        """The wait before the attempt after ``attempt`` (1-based) failed."""
        ceiling = self.ceiling_ms(attempt)
        return int((rng or random).uniform(ceiling * (1 - self.jitter), ceiling))

    def exhausted(self, attempt: int) -> bool:
        """True when attempt ``attempt`` was the last one allowed."""
        return attempt >= self.max_attempts

    def overridden(self, terms: RetryTerms | None) -> RetryPolicy:
        """This policy with what ``terms`` sets (None: as it is)."""
        if terms is None:
            return self
        given = {f.name: getattr(terms, f.name) for f in fields(terms)
                 if getattr(terms, f.name) is not None}
        return replace(self, **given) if given else self

    def overridden_attempts(self, max_attempts: int) -> RetryPolicy:
        """This policy allowing ``max_attempts`` tries."""
        return replace(self, max_attempts=max_attempts)

    def to_json(self) -> dict[str, Any]:
        """The policy as the API answers it (durations in seconds)."""
        return {"max_attempts": self.max_attempts, "base": self.base_ms / 1000,
                "cap": self.cap_ms / 1000, "multiplier": self.multiplier,
                "jitter": self.jitter,
                "max_retry_duration": (None if self.max_duration_ms is None
                                       else self.max_duration_ms / 1000)}


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryTerms:
    """What a schedule (or a channel) sets of its :class:`RetryPolicy`; None: not set, the
    level below decides (schedule over channel over the dispatcher's settings)."""

    max_attempts: int | None = None
    base_ms: int | None = None
    cap_ms: int | None = None
    multiplier: float | None = None
    jitter: float | None = None
    max_duration_ms: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The set fields, as stored (milliseconds)."""
        return {f.name: getattr(self, f.name) for f in fields(self)
                if getattr(self, f.name) is not None}

    @classmethod
    def from_json(cls, value: dict[str, Any]) -> RetryTerms:
        """:meth:`to_json`'s inverse (unknown names are ignored: a later version's)."""
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in value.items() if k in names})

"""Retry with exponential back-off and full jitter."""

from __future__ import annotations

import random
from dataclasses import dataclass

from tocsin.domain.defaults import MAX_ATTEMPTS, RETRY_BASE_MS, RETRY_CAP_MS

__all__ = ["RetryPolicy"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """``max_attempts`` tries; the n-th retry waits a random time in ``[d/2, d]``
    where ``d = min(cap, base * 2**(n-1))``."""

    base_ms: int = RETRY_BASE_MS
    cap_ms: int = RETRY_CAP_MS
    max_attempts: int = MAX_ATTEMPTS

    def delay_ms(self, attempt: int, rng: random.Random | None = None) -> int:
        """The wait before the attempt after ``attempt`` (1-based) failed."""
        ceiling = min(self.cap_ms, self.base_ms * 2 ** max(0, attempt - 1))
        return int((rng or random).uniform(ceiling / 2, ceiling))

    def exhausted(self, attempt: int) -> bool:
        """True when attempt ``attempt`` was the last one allowed."""
        return attempt >= self.max_attempts

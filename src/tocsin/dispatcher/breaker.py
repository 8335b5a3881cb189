"""A destination's circuit breaker: consecutive failures open it, a probe closes it.

::

    CLOSED ──(``failures`` failed attempts in a row)──▶ OPEN ──(``open_ms`` passes)──▶ PROBING
      ▲                                                   ▲                            │
      └──────────────── the probe is delivered ───────────┴── the probe fails (open ───┘
                                                               twice as long, at most
                                                               ``max_open_ms``)

A failed attempt is one the channel answers RETRY (a timeout, a refused or lost connection, a
5xx, a 429): the destination did not take it. A delivered or a rejected attempt (the destination
answered, even "no") resets the count. While the breaker is open the dispatcher passes over the
destination's schedules (they wait PENDING, no attempt spent); when it probes, one schedule is
sent alone, and the others wait for its answer. Pure logic, with time from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tocsin.domain import Outcome

__all__ = ["Breaker", "BreakerPolicy", "BreakerState"]


class BreakerState(StrEnum):
    """Where a breaker stands."""

    CLOSED = "closed"
    """Sends go out as they come."""
    OPEN = "open"
    """Nothing is sent until the probe time."""
    PROBING = "probing"
    """One send, the probe, is out or due; the others wait for its answer."""


@dataclass(frozen=True, kw_only=True, slots=True)
class BreakerPolicy:
    """When a breaker opens and how long it stays open."""

    failures: int = 5
    """Failed attempts in a row that open it."""
    open_ms: int = 5_000
    """How long it first stays open."""
    max_open_ms: int = 300_000
    """The longest it stays open (each failed probe doubles the time)."""


class Breaker:
    """One destination's breaker (not thread-safe: the engine's loop owns it)."""

    def __init__(self, policy: BreakerPolicy) -> None:
        self.policy = policy
        self.state = BreakerState.CLOSED
        self.failures = 0
        """Failed attempts in a row."""
        self.until_ms = 0
        """While OPEN: when it probes."""
        self.since_ms = 0
        """When it last opened."""
        self.trips = 0
        """Times it opened since it was last closed (the open time doubles with each)."""
        self.last_error: str | None = None

    def record(self, outcome: Outcome, error: str | None, *, now_ms: int) -> bool:
        """Count one attempt's outcome; True when this opened the breaker."""
        if outcome is not Outcome.RETRY:
            self.failures = 0
            if self.state is BreakerState.PROBING:
                self.state, self.trips = BreakerState.CLOSED, 0
            return False
        self.failures += 1
        self.last_error = error
        if self.state is BreakerState.PROBING or (
                self.state is BreakerState.CLOSED and self.failures >= self.policy.failures):
            self._open(now_ms)
            return True
        return False

    def _open(self, now_ms: int) -> None:
        wait = min(self.policy.open_ms << min(self.trips, 20), self.policy.max_open_ms)
        self.state, self.since_ms, self.until_ms = BreakerState.OPEN, now_ms, now_ms + wait
        self.trips += 1

    def due_probe(self, now_ms: int) -> bool:
        """True (moving to PROBING) when an open breaker's time is up."""
        if self.state is BreakerState.OPEN and now_ms >= self.until_ms:
            self.state = BreakerState.PROBING
            return True
        return False

    @property
    def sending(self) -> bool:
        """Whether sends may go out now as they come (CLOSED)."""
        return self.state is BreakerState.CLOSED

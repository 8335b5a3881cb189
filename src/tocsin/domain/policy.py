"""Throttling policies: how many deliveries of a kind may be in flight, and how fast they start.

A schedule that names a policy takes one of its tokens when it is claimed for delivery and
waits, still due and in due order, while none is free. The consumer hands the token back with
``POST /v1/deliveries/{delivery_id}/release``; a token not returned within ``token_lease_ms``
comes back by itself; a delivery that failed returns its token at once (the consumer never
held the message). The store decides all of it atomically, so ``max_in_flight`` holds across
every executor and dispatcher.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from tocsin.domain.tenant import DEFAULT_TENANT
from tocsin.errors import ValidationError

__all__ = ["Policy", "RateBucket"]

_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")


@dataclass(frozen=True, kw_only=True, slots=True)
class Policy:
    """A named throttle: at most ``max_in_flight`` deliveries holding a token at once, and (if
    ``rate`` is set) at most ``rate`` new deliveries per second, in bursts of up to one second's
    worth (at least one). Policies are namespaced by tenant: a schedule draws on the policy of
    its own tenant with the name it gives."""

    name: str
    max_in_flight: int
    rate: float | None = None
    """Deliveries started per second; None: no rate limit."""
    token_lease_ms: int = 300_000
    """A token not released within this long returns by itself."""
    tenant: str = DEFAULT_TENANT

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValidationError("name", "1 to 128 letters, digits, '.', '_' or '-'")
        if self.max_in_flight < 1:
            raise ValidationError("max_in_flight",
                                  f"must be at least 1, got {self.max_in_flight}")
        if self.rate is not None and not (math.isfinite(self.rate) and self.rate > 0):
            raise ValidationError("rate", f"must be a positive number of events per second, "
                                          f"got {self.rate}")
        if self.token_lease_ms < 1:
            raise ValidationError("token_lease", "must be positive")

    @property
    def burst(self) -> float:
        """The most rate tokens that can pile up: one second's worth, at least one."""
        return max(1.0, self.rate or 1.0)


@dataclass(frozen=True, slots=True)
class RateBucket:
    """A token bucket for :attr:`Policy.rate`: ``tokens`` available at ``at_ms``."""

    tokens: float
    at_ms: int

    def refill(self, policy: Policy, now_ms: int) -> float:
        """The tokens available at ``now_ms`` (unbounded when the policy has no rate)."""
        if policy.rate is None:
            return math.inf
        grown = self.tokens + max(0, now_ms - self.at_ms) * policy.rate / 1000
        return min(policy.burst, grown)

    def ready_ms(self, policy: Policy, now_ms: int) -> int:
        """When the next whole token is there (``now_ms`` if it is already)."""
        tokens = self.refill(policy, now_ms)
        if tokens >= 1 or policy.rate is None:
            return now_ms
        return now_ms + math.ceil((1 - tokens) * 1000 / policy.rate)

"""Per-tenant caps on creating schedules: how many a tenant may hold PENDING (or CLAIMED), and
how many it may create a second. A request over either answers 429 with ``Retry-After``.

Both are off by default (``tenant_max_pending`` and ``tenant_creates_per_second`` are 0): the
embedded single user and the benchmarks are one tenant that should never be slowed down; an
operator serving several tenants sets them (docs/security.md).

The rate is a token bucket per tenant, per API process (with n replicas a tenant may create n
times the rate). It may go into debt: a request is admitted whenever the bucket is not empty
and takes a token per schedule, so a batch larger than one second's worth passes, and the
tenant's next request waits until the debt is paid. The pending cap is checked before the
insert, not inside it: concurrent requests of one tenant may overshoot it by a request each.
"""

from __future__ import annotations

import math
import threading
from collections import Counter

from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.errors import QuotaExceededError, ValidationError

__all__ = ["CreateRate", "Quotas"]

PENDING_RETRY_S = 60
"""What a tenant at its pending cap is told to wait: schedules drain as they fire, and a
minute is a sensible poll for that."""


class CreateRate:
    """A token bucket per tenant, refilled at ``per_second`` up to one second's worth."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self.capacity = max(per_second, 1.0)
        self._buckets: dict[str, tuple[float, int]] = {}
        """tenant → (tokens, when counted, in ms)."""
        self._lock = threading.Lock()

    def take(self, tenant: str, n: int, *, now_ms: int) -> int:
        """Take ``n`` tokens of ``tenant``'s bucket: 0 when admitted, else the whole seconds
        until the bucket holds a token again (nothing is taken then)."""
        with self._lock:
            tokens, at_ms = self._buckets.get(tenant, (self.capacity, now_ms))
            tokens = min(self.capacity,
                         tokens + max(0, now_ms - at_ms) / 1000 * self.per_second)
            if tokens <= 0:
                self._buckets[tenant] = (tokens, now_ms)
                return max(1, math.ceil(-tokens / self.per_second))
            self._buckets[tenant] = (tokens - n, now_ms)
            return 0


class Quotas:
    """The caps of one API process (see the module's docstring)."""

    def __init__(self, *, max_pending: int = 0, creates_per_second: float = 0.0) -> None:
        self.max_pending = max_pending
        self.rate = CreateRate(creates_per_second) if creates_per_second > 0 else None

    @property
    def active(self) -> bool:
        """Whether any cap is set (none is, by default)."""
        return bool(self.max_pending) or self.rate is not None

    @classmethod
    def of(cls, settings: Settings) -> Quotas:
        """The caps ``settings`` ask for."""
        return cls(max_pending=settings.tenant_max_pending,
                   creates_per_second=settings.tenant_creates_per_second)

    def admit(self, store: Store, adding: Counter[str], *, now_ms: int) -> None:
        """Let a request that creates ``adding[tenant]`` schedules per tenant through, or
        raise :class:`QuotaExceededError` (:class:`ValidationError` for a request that could
        never fit: waiting would not help)."""
        if self.max_pending:
            for tenant, n in adding.items():
                if n > self.max_pending:
                    raise ValidationError("schedules", f"{n} schedules for tenant {tenant!r} "
                                          f"are over its pending cap of {self.max_pending}")
                held = store.pending_count(tenant=tenant)
                if held + n > self.max_pending:
                    raise QuotaExceededError(
                        f"tenant {tenant!r} holds {held} pending schedules and the cap is "
                        f"{self.max_pending}; this request adds {n}",
                        retry_after_s=PENDING_RETRY_S)
        if self.rate is not None:
            for tenant, n in adding.items():
                if wait_s := self.rate.take(tenant, n, now_ms=now_ms):
                    raise QuotaExceededError(
                        f"tenant {tenant!r} creates more than {self.rate.per_second:g} "
                        f"schedules a second; retry in {wait_s} s", retry_after_s=wait_s)

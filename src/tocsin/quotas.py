"""Per-tenant caps on creating schedules, the same on every way in (the API, the Kafka
commands topic): how many a tenant may hold PENDING (or CLAIMED), and how many it may create
a second. A request over either answers 429 with ``Retry-After``.

Recurring rules make schedules too, so they are capped as well (:meth:`Quotas.admit_rule`):
how many rules a tenant may hold (``tenant_max_recurring``), and how many messages a minute its
active rules may make together (``tenant_recurring_per_minute``: the sum of each rule's count x
its firings a minute). A rule whose one firing makes more messages than the pending cap could
never fire within it: a 422 on ``count``.

Both are off by default (``tenant_max_pending`` and ``tenant_creates_per_second`` are 0): the
embedded single user and the benchmarks are one tenant that should never be slowed down; an
operator serving several tenants sets them (docs/security.md).

A tenant's rule and channel caps are checked and the write made under one lock of that tenant
(:meth:`Quotas.holding`), so concurrent creates in one API process cannot pass a cap together;
``tenant_max_channels`` caps the channels a tenant may register (each costs the dispatcher a
client and a destination to claim for). With several API processes each may admit one more.

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
from collections.abc import Iterator
from contextlib import contextmanager

from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.domain import ChannelSpec, Recurring
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

    def __init__(self, *, max_pending: int = 0, creates_per_second: float = 0.0,
                 max_rules: int = 0, rules_per_minute: int = 0, max_channels: int = 0) -> None:
        self.max_pending = max_pending
        self.rate = CreateRate(creates_per_second) if creates_per_second > 0 else None
        self.max_rules = max_rules
        self.rules_per_minute = rules_per_minute
        self.max_channels = max_channels
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    @contextmanager
    def holding(self, tenant: str) -> Iterator[None]:
        """Hold ``tenant``'s lock: a cap's check and the write it admits, as one step."""
        with self._guard:
            lock = self._locks.setdefault(tenant, threading.Lock())
        with lock:
            yield

    def admit_channel(self, store: Store, spec: ChannelSpec) -> None:
        """Let ``spec`` be registered, or raise :class:`QuotaExceededError` when its tenant
        holds ``max_channels`` others (replacing a channel always passes)."""
        if not self.max_channels:
            return
        held = [c.name for c in store.list_channels(tenant=spec.tenant)]
        if spec.name not in held and len(held) >= self.max_channels:
            raise QuotaExceededError(f"tenant {spec.tenant!r} holds {len(held)} channels and "
                                     f"the cap is {self.max_channels}",
                                     retry_after_s=PENDING_RETRY_S)

    @property
    def active(self) -> bool:
        """Whether any cap on schedules is set (none is, by default)."""
        return bool(self.max_pending) or self.rate is not None

    @classmethod
    def of(cls, settings: Settings) -> Quotas:
        """The caps ``settings`` ask for."""
        return cls(max_pending=settings.tenant_max_pending,
                   creates_per_second=settings.tenant_creates_per_second,
                   max_rules=settings.tenant_max_recurring,
                   rules_per_minute=settings.tenant_recurring_per_minute,
                   max_channels=settings.tenant_max_channels)

    def admit_rule(self, store: Store, rule: Recurring) -> None:
        """Let ``rule`` (new, changed or resumed) be stored, or raise
        :class:`QuotaExceededError` when its tenant would hold more rules, or its active rules
        make more messages a minute, than the caps allow (the stored version of ``rule``
        itself does not count); :class:`ValidationError` on ``count`` when one firing makes
        more messages than the pending cap."""
        if self.max_pending and rule.count > self.max_pending:
            raise ValidationError("count", f"one firing makes {rule.count} schedules, over the "
                                           f"pending cap of {self.max_pending} of tenant "
                                           f"{rule.tenant!r}")
        if not (self.max_rules or self.rules_per_minute):
            return
        others = [r for r in _rules(store, rule.tenant) if r.id != rule.id]
        if self.max_rules and len(others) + 1 > self.max_rules:
            raise QuotaExceededError(f"tenant {rule.tenant!r} holds {len(others)} recurring "
                                     f"rules and the cap is {self.max_rules}",
                                     retry_after_s=PENDING_RETRY_S)
        if self.rules_per_minute and not rule.paused:
            held = sum(r.messages_per_minute for r in others if not r.paused)
            if held + rule.messages_per_minute > self.rules_per_minute:
                raise QuotaExceededError(
                    f"tenant {rule.tenant!r}'s active recurring rules make {held} messages a "
                    f"minute, this one {rule.messages_per_minute}, and the cap is "
                    f"{self.rules_per_minute}", retry_after_s=PENDING_RETRY_S)

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
        for tenant, n in adding.items():
            self.admit_rate(tenant, n, now_ms=now_ms)

    def admit_rate(self, tenant: str, n: int, *, now_ms: int) -> None:
        """Take ``n`` of ``tenant``'s create rate, or raise :class:`QuotaExceededError`."""
        if self.rate is not None and (wait_s := self.rate.take(tenant, n, now_ms=now_ms)):
            raise QuotaExceededError(
                f"tenant {tenant!r} creates more than {self.rate.per_second:g} "
                f"schedules a second; retry in {wait_s} s", retry_after_s=wait_s)


def _rules(store: Store, tenant: str) -> list[Recurring]:
    """Every recurring rule of ``tenant``, a page at a time."""
    found: list[Recurring] = []
    while page := store.list_recurring(tenant=tenant, limit=1000,
                                       after_id=found[-1].id if found else None):
        found += page
        if len(page) < 1000:
            break
    return found

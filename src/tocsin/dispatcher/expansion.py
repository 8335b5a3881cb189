"""Recurring expansion, free of Spark: the firings of recurring schedules within the horizon
become concrete schedules.

:class:`ExpansionCore` holds one batch's steps (``next_offset`` on the driver, ``expand`` per
bucket range, ``record_batch``); the Spark query (:mod:`tocsin.dispatcher.expander`) and the
in-process runner (:mod:`tocsin.dispatcher.local`) both call it. Expanding is idempotent:
schedules get deterministic ids, and each recurring moves on by compare-and-set on (revision,
expanded_until), so a replayed batch or a second dispatcher adds nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tocsin.abc import Store
from tocsin.clock import Clock, iso_ms
from tocsin.dispatcher.beat import EXPANDER_BEAT_KEYS, ExpanderBeat
from tocsin.dispatcher.core import Offset, bucket_ranges, log
from tocsin.dispatcher.options import DispatchOptions
from tocsin.domain import (
    Expansion,
    Firing,
    NewSchedule,
    Recurring,
    SkippedFiring,
    SkipReason,
    expand,
)
from tocsin.errors import StoreError, TocsinError
from tocsin.stores.retry import retrying

__all__ = ["CHUNK", "EXPANDER", "ExpandTally", "ExpansionCore", "expand_due", "messages_of"]

EXPANDER = "expander"
"""Component name of the expansion query's beat."""
CHUNK = 200
"""Recurring schedules recorded per store transaction."""


@dataclass(kw_only=True, slots=True)
class ExpandTally:
    """What an expansion came to."""

    recurring: int = 0
    """Recurring schedules moved on."""
    firings: int = 0
    messages: int = 0
    skipped: int = 0
    stale: int = 0
    """Read, but changed or expanded by someone else before this expansion was recorded."""
    failed: int = 0
    """Marked failed: they could not be expanded (see :func:`expand_due`)."""
    reasons: dict[str, int] = field(default_factory=dict)

    def add(self, other: ExpandTally) -> None:
        """Fold ``other`` into this tally."""
        self.recurring += other.recurring
        self.firings += other.firings
        self.messages += other.messages
        self.skipped += other.skipped
        self.stale += other.stale
        self.failed += other.failed
        for reason, n in other.reasons.items():
            self.reasons[reason] = self.reasons.get(reason, 0) + n


def messages_of(recurring: Recurring, expansion: Expansion) -> list[NewSchedule]:
    """The schedules of an expansion's firings, with their deterministic ids."""
    base = {**recurring.headers, "Tocsin-Recurring-Id": recurring.id}
    return [
        NewSchedule(
            id=f.schedule_id, channel=recurring.channel, payload=recurring.payload,
            payload_kind=recurring.payload_kind,
            headers={**base, "Tocsin-Firing-At": iso_ms(f.firing_ms),
                     "Tocsin-Firing-Index": str(f.index)},
            due_ms=f.due_ms, tenant=recurring.tenant, policy=recurring.policy,
            recurring_id=recurring.id, firing_ms=f.firing_ms, terms=recurring.terms,
            labels=recurring.labels,
        )
        for f in expansion.firings
    ]


_Recorded = tuple[Recurring, Expansion, Sequence[NewSchedule], int | None]


def expand_due(store: Store, *, bucket_lo: int, bucket_hi: int, now_ms: int, horizon_ms: int,
               limit: int = 10_000, max_per_minute: int = 100_000,
               max_pending: int = 0) -> ExpandTally:
    """Expand every recurring schedule of buckets ``[bucket_lo, bucket_hi]`` that is due for
    expansion at ``now_ms``: its firings up to ``now_ms + horizon_ms`` become schedules, or
    are recorded skipped (paused, misfire policy).

    A rule that cannot be expanded (it makes more than ``max_per_minute`` messages a minute,
    or expanding it raises) is marked failed with the reason and left alone from then on; the
    other rules of the range are expanded all the same. Only a :class:`StoreError` (the store
    is down) fails the whole range, to be retried.

    With ``max_pending`` (the tenants' pending cap), a tenant's firings are scheduled, whole
    and in order, only while its pending schedules stay within the cap; the firings past it are
    recorded skipped (:attr:`~tocsin.domain.SkipReason.PENDING_CAP`)."""
    tally = ExpandTally()
    room: dict[str, int] = {}
    due = store.recurring_due(bucket_lo=bucket_lo, bucket_hi=bucket_hi, now_ms=now_ms,
                              limit=limit)
    for start in range(0, len(due), CHUNK):
        batch: list[_Recorded] = []
        for recurring in due[start:start + CHUNK]:
            try:
                recurring.check_rate(max_per_minute)
                expansion = expand(recurring, from_ms=recurring.expanded_until_ms or now_ms,
                                   now_ms=now_ms, horizon_ms=horizon_ms)
                nxt = recurring.next_expand_ms_after(expansion.until_ms, now_ms=now_ms,
                                                     horizon_ms=horizon_ms)
                if max_pending:
                    expansion = _within_cap(store, recurring, expansion, room, max_pending)
                batch.append((recurring, expansion, messages_of(recurring, expansion), nxt))
            except StoreError:
                raise
            except Exception as exc:  # one bad rule never blocks its bucket range
                _fail(store, recurring, exc, now_ms=now_ms, tally=tally)
        applied = _record(store, batch, now_ms=now_ms, tally=tally)
        tally.recurring += applied
        tally.stale += len(batch) - applied
        if applied == len(batch):  # (when some were stale, count only what surely landed)
            for _, expansion, items, _ in batch:
                tally.firings += len({f.firing_ms for f in expansion.firings})
                tally.messages += len(items)
                tally.skipped += len(expansion.skipped)
                for s in expansion.skipped:
                    tally.reasons[s.reason] = tally.reasons.get(s.reason, 0) + 1
    return tally


def _within_cap(store: Store, recurring: Recurring, expansion: Expansion, room: dict[str, int],
                max_pending: int) -> Expansion:
    """``expansion`` with the firings that would take ``recurring``'s tenant past
    ``max_pending`` moved to its skipped ones; ``room`` keeps each tenant's room left."""
    tenant = recurring.tenant
    if tenant not in room:
        room[tenant] = max_pending - store.pending_count(tenant=tenant)
    by_firing: dict[int, list[Firing]] = {}
    for f in expansion.firings:
        by_firing.setdefault(f.firing_ms, []).append(f)
    kept: list[Firing] = []
    skipped = list(expansion.skipped)
    for firing_ms, messages in by_firing.items():
        if len(messages) <= room[tenant]:
            kept += messages
            room[tenant] -= len(messages)
        else:
            room[tenant] = 0  # firings stay in order: none after a skipped one
            skipped.append(SkippedFiring(firing_ms=firing_ms, reason=SkipReason.PENDING_CAP))
    if len(kept) == len(expansion.firings):
        return expansion
    log.warning("expander: recurring %s: tenant %r is at its pending cap of %d; %d firings "
                "skipped", recurring.id, tenant, max_pending,
                len(skipped) - len(expansion.skipped))
    return Expansion(firings=kept, skipped=skipped, until_ms=expansion.until_ms)


def _record(store: Store, batch: list[_Recorded], *, now_ms: int, tally: ExpandTally) -> int:
    """Record ``batch`` in one transaction; when that raises anything but a
    :class:`StoreError`, record its rules one by one and fail the ones that raise."""
    if not batch:
        return 0
    try:
        return store.record_expansions(batch, now_ms=now_ms)
    except StoreError:
        raise
    except Exception as exc:
        if len(batch) == 1:
            _fail(store, batch[0][0], exc, now_ms=now_ms, tally=tally)
            return 0
    return sum(_record(store, [item], now_ms=now_ms, tally=tally) for item in batch)


def _fail(store: Store, recurring: Recurring, exc: Exception, *, now_ms: int,
          tally: ExpandTally) -> None:
    """Mark ``recurring`` failed with the reason ``exc`` gives."""
    reason = str(exc) if isinstance(exc, TocsinError) else f"{type(exc).__name__}: {exc}"
    log.warning("expander: recurring %s failed: %s", recurring.id, reason)
    store.fail_recurring(recurring.id, reason=reason[:500], now_ms=now_ms)
    tally.failed += 1


class ExpansionCore:
    """One expansion batch over ``store``, with time from ``clock``."""

    def __init__(self, store: Store, *, options: DispatchOptions, clock: Clock) -> None:
        self.store = store
        self.options = options
        self.clock = clock

    def next_offset(self, start: Offset) -> Offset:
        """``{"until": now}`` when some recurring schedule is due for expansion, else
        ``start`` (no batch; also while the store is down)."""
        now = self.clock.now_ms()
        try:
            due = self.store.next_expansion_ms()
        except StoreError as exc:
            log.warning("expander: store unavailable, no batch: %s", exc)
            return start
        if due is None or due > now:
            return start
        return {"until": max(now, start["until"] + 1)}

    def parts(self, start: Offset, end: Offset) -> list[tuple[int, int, int]]:
        """The batch as ``(bucket_lo, bucket_hi, until_ms)`` ranges."""
        if start == end:
            return []
        return [(lo, hi, end["until"])
                for lo, hi in bucket_ranges(self.store.buckets, self.options.partitions)]

    def expand(self, lo: int, hi: int, until_ms: int) -> ExpandTally:
        """Expand one range as of ``until_ms`` (retried while the store is down)."""
        return retrying(lambda: expand_due(self.store, bucket_lo=lo, bucket_hi=hi,
                                           now_ms=until_ms, horizon_ms=self.options.horizon_ms,
                                           max_per_minute=self.options.max_per_minute,
                                           max_pending=self.options.max_pending),
                        what="expand", clock=self.clock)

    def record_batch(self, batch_id: int, tally: ExpandTally) -> None:
        """Beat ``expander`` with the batch's counts and the running totals."""
        counts = {k: getattr(tally, k) for k in EXPANDER_BEAT_KEYS}
        try:
            last = self.store.last_beat(EXPANDER)
            beat = ExpanderBeat.from_info(last[1] if last else None).after(batch_id, counts)
            self.store.beat(EXPANDER, now_ms=self.clock.now_ms(), info=beat.to_info())
        except StoreError as exc:
            log.warning("expander: could not record batch %d: %s", batch_id, exc)

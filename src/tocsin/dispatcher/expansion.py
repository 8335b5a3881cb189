"""Expanding recurring schedules in one bucket range: what the expansion query runs on its
executors (:mod:`tocsin.dispatcher.expander`), written without Spark so tests drive it with
explicit clock values."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from tocsin.abc import Store
from tocsin.clock import from_ms
from tocsin.dispatcher.runtime import log
from tocsin.domain import Expansion, NewSchedule, Recurring, expand
from tocsin.errors import StoreError, TocsinError

__all__ = ["CHUNK", "ExpandTally", "expand_due", "messages_of"]

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
            headers={**base, "Tocsin-Firing-At": _iso(f.firing_ms),
                     "Tocsin-Firing-Index": str(f.index)},
            due_ms=f.due_ms, tenant=recurring.tenant, policy=recurring.policy,
            recurring_id=recurring.id, firing_ms=f.firing_ms,
        )
        for f in expansion.firings
    ]


def _iso(ms: int) -> str:
    return from_ms(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")


_Recorded = tuple[Recurring, Expansion, Sequence[NewSchedule], int | None]


def expand_due(store: Store, *, bucket_lo: int, bucket_hi: int, now_ms: int, horizon_ms: int,
               limit: int = 10_000, max_per_minute: int = 100_000) -> ExpandTally:
    """Expand every recurring schedule of buckets ``[bucket_lo, bucket_hi]`` that is due for
    expansion at ``now_ms``: its firings up to ``now_ms + horizon_ms`` become schedules, or
    are recorded skipped (paused, misfire policy).

    A rule that cannot be expanded (it makes more than ``max_per_minute`` messages a minute,
    or expanding it raises) is marked failed with the reason and left alone from then on; the
    other rules of the range are expanded all the same. Only a :class:`StoreError` (the store
    is down) fails the whole range, to be retried."""
    tally = ExpandTally()
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

"""A :class:`Selection` of waiting schedules (bulk cancel and reschedule by predicate) and what
a bulk change came to (:class:`BulkResult`)."""

from __future__ import annotations

from dataclasses import dataclass

from tocsin.errors import ValidationError

__all__ = ["MAX_BULK", "BulkResult", "Selection"]

MAX_BULK = 100_000
"""The most schedules one bulk change through the API may touch (the Spark job has no bound)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Selection:
    """Schedules matching every filter given; only waiting ones (PENDING) are changed, those
    already firing (CLAIMED) are counted as too late. At least one filter besides ``tenant``
    is required, so that no call changes a whole tenant by mistake."""

    tenant: str | None = None
    """Only this tenant's schedules (None: every tenant's, for admin callers)."""
    channel: str | None = None
    key_prefix: str | None = None
    """Schedules whose idempotency key starts with it (``campaign-7/``)."""
    ordering_key: str | None = None
    recurring_id: str | None = None
    """Firings of this recurring schedule."""
    due_from_ms: int | None = None
    """Due at or after it."""
    due_to_ms: int | None = None
    """Due strictly before it."""
    buckets: tuple[int, int] | None = None
    """Only buckets ``lo..hi`` (inclusive): a Spark partition's share of the job."""
    labels: tuple[tuple[str, str], ...] = ()
    """A label selector's pairs: schedules carrying every one (:mod:`tocsin.domain.labels`)."""

    def __post_init__(self) -> None:
        if not self.labels and all(v is None for v in (
                self.channel, self.key_prefix, self.ordering_key, self.recurring_id,
                self.due_from_ms, self.due_to_ms)):
            raise ValidationError("selection", "give at least one of channel, key_prefix, "
                                  "ordering_key, recurring_id, due_from, due_to, label")
        if self.key_prefix == "":
            raise ValidationError("key_prefix", "must not be empty")
        if (self.due_from_ms is not None and self.due_to_ms is not None
                and self.due_to_ms <= self.due_from_ms):
            raise ValidationError("due_to", "must be after due_from")

    def within(self, lo: int, hi: int) -> Selection:
        """The same selection, restricted to buckets ``lo..hi``."""
        return Selection(tenant=self.tenant, channel=self.channel, key_prefix=self.key_prefix,
                         ordering_key=self.ordering_key, recurring_id=self.recurring_id,
                         due_from_ms=self.due_from_ms, due_to_ms=self.due_to_ms,
                         buckets=(lo, hi), labels=self.labels)


@dataclass(frozen=True, kw_only=True, slots=True)
class BulkResult:
    """What a bulk change came to."""

    matched: int
    """Schedules of the selection seen waiting or firing."""
    changed: int
    """Cancelled (or rescheduled): each by the same compare-and-set as a single change, so
    none of them is delivered (or fires at its old time)."""
    too_late: int
    """Firing or fired before the change reached them (CLAIMED, or claimed meanwhile)."""
    more: bool
    """The limit was reached: more schedules may match (call again)."""

    def __add__(self, other: BulkResult) -> BulkResult:
        return BulkResult(matched=self.matched + other.matched,
                          changed=self.changed + other.changed,
                          too_late=self.too_late + other.too_late,
                          more=self.more or other.more)

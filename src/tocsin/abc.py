"""The interfaces Tocsin's backends implement: :class:`Store` and :class:`Channel`.

One module per backend implements them (``tocsin.stores.sqlite``, ``tocsin.channels.kafka``...).
"""

from __future__ import annotations

import builtins
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, NamedTuple

from tocsin.domain import (
    Ack,
    ChannelSpec,
    Delivery,
    Envelope,
    NewSchedule,
    PayloadKind,
    Result,
    Schedule,
    Status,
)

__all__ = ["Channel", "ClaimedRow", "HaltedKey", "Store"]


class ClaimedRow(NamedTuple):
    """One schedule handed to a dispatcher epoch (a plain tuple: claims are the hot path)."""

    id: str
    tenant: str
    channel: str
    payload: bytes
    payload_kind: str
    headers: str
    """The headers as a JSON object."""
    due_ms: int
    attempt: int
    """The attempt this claim makes (1 for the first); a replayed claim keeps its number."""
    key: str | None
    ordering_key: str | None
    epoch: int


class HaltedKey(NamedTuple):
    """An ordering key halted by a dead schedule (its channel says ``on_dead: halt``)."""

    tenant: str
    ordering_key: str
    schedule_id: str
    halted_ms: int
    reason: str | None


class Store(ABC):
    """The system of record. Every state change is one atomic statement or transaction.

    Claims and the client's cancel are decided by compare-and-set on ``status``; a claim is
    stamped with the dispatcher's epoch and every acknowledgement is fenced by it, so a
    superseded dispatcher can never overwrite a newer claim.
    """

    buckets: int
    """B: a schedule's bucket is ``murmur3(id) % B``, fixed when the store was created."""
    schema_version: int
    """The newest migration applied."""

    # -- schedules -------------------------------------------------------------------------

    @abstractmethod
    def create(self, items: Sequence[NewSchedule], *, now_ms: int) -> list[tuple[Schedule, bool]]:
        """Store every item or none. Returns each schedule with True when newly created, False
        when an item's ``key`` matched an existing schedule with the same request
        (:class:`~tocsin.errors.ConflictError` when the request differs)."""

    @abstractmethod
    def get(self, schedule_id: str) -> Schedule:
        """The schedule, or :class:`~tocsin.errors.NotFoundError`."""

    @abstractmethod
    def list(
        self,
        *,
        status: Status | None = None,
        channel: str | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        after_id: str | None = None,
        limit: int = 100,
    ) -> list[Schedule]:
        """Schedules matching the filters, in id order, after ``after_id`` (the cursor)."""

    @abstractmethod
    def cancel(self, schedule_id: str, *, now_ms: int) -> Schedule:
        """PENDING → CANCELLED atomically; :class:`~tocsin.errors.ConflictError` naming the
        current status when it is too late."""

    @abstractmethod
    def reschedule(self, schedule_id: str, *, now_ms: int, due_ms: int | None = None,
                   payload: bytes | None = None, payload_kind: PayloadKind | None = None,
                   headers: dict[str, str] | None = None) -> Schedule:
        """Change a PENDING schedule's due time, payload or headers, atomically (the same
        compare-and-set as :meth:`cancel`); :class:`~tocsin.errors.ConflictError` naming the
        current status when it is too late."""

    @abstractmethod
    def halted_keys(self, *, tenant: str | None = None) -> builtins.list[HaltedKey]:
        """The ordering keys halted now."""

    @abstractmethod
    def resume_key(self, *, tenant: str, ordering_key: str) -> None:
        """Let a halted key's next schedules go; :class:`~tocsin.errors.NotFoundError` when
        the key is not halted."""

    @abstractmethod
    def deliveries(self, schedule_id: str) -> builtins.list[Delivery]:
        """The attempt log of one schedule, oldest first."""

    # -- channels --------------------------------------------------------------------------

    @abstractmethod
    def put_channel(self, spec: ChannelSpec) -> ChannelSpec:
        """Register or replace a channel."""

    @abstractmethod
    def get_channel(self, name: str) -> ChannelSpec:
        """A registered channel, or :class:`~tocsin.errors.NotFoundError`."""

    @abstractmethod
    def list_channels(self) -> builtins.list[ChannelSpec]:
        """Every registered channel, by name."""

    @abstractmethod
    def delete_channel(self, name: str) -> None:
        """Forget a channel (its schedules then die on delivery)."""

    # -- dispatch --------------------------------------------------------------------------

    @abstractmethod
    def next_epoch(self) -> int:
        """A new epoch, greater than every epoch this store has handed out."""

    @abstractmethod
    def next_due_ms(self, *, now_ms: int, lease_ms: int) -> int | None:
        """The earliest time something becomes claimable (a PENDING schedule's next time, or an
        expired claim's lease end), or None when nothing waits."""

    @abstractmethod
    def claim(
        self,
        *,
        epoch: int,
        bucket_lo: int,
        bucket_hi: int,
        until_ms: int,
        now_ms: int,
        lease_ms: int,
        limit: int,
    ) -> builtins.list[ClaimedRow]:
        """Claim, for ``epoch``, up to ``limit`` schedules in buckets ``[bucket_lo, bucket_hi]``
        that are PENDING with next time ``<= until_ms`` (no lower bound), or CLAIMED longer ago
        than the lease, earliest first. Called again with the same epoch and range (a replay), it
        claims nothing new and returns the rows that epoch claimed and has not acknowledged."""

    @abstractmethod
    def acknowledge(self, *, epoch: int, acks: Sequence[Ack], now_ms: int) -> int:
        """Apply each verdict to its schedule if it is still CLAIMED by ``epoch``; log every
        attempt; copy the dead to their dead-letter channels. Returns how many applied."""

    @abstractmethod
    def forget_claims(self, *, before_ms: int) -> int:
        """Delete replay markers of claims made before ``before_ms`` (their rows are long
        acknowledged or reclaimable after the lease). Returns how many were deleted."""

    # -- health and metrics ----------------------------------------------------------------

    @abstractmethod
    def beat(self, component: str, *, now_ms: int, info: dict[str, Any] | None = None) -> None:
        """Record that ``component`` (e.g. the dispatcher) finished work at ``now_ms``."""

    @abstractmethod
    def last_beat(self, component: str) -> tuple[int, dict[str, Any]] | None:
        """When ``component`` last beat, and what it said."""

    @abstractmethod
    def counts(self) -> dict[Status, int]:
        """How many schedules are in each status."""

    @abstractmethod
    def due_backlog(self, *, now_ms: int) -> int:
        """How many PENDING schedules are already due."""

    @abstractmethod
    def ping(self) -> None:
        """Raise :class:`~tocsin.errors.StoreError` unless the store answers."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Release connections."""


class Channel(ABC):
    """A transport. ``send`` hands over a batch and answers for every envelope in it."""

    spec: ChannelSpec

    @abstractmethod
    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        """Deliver the envelopes; one :class:`Result` per envelope, in any order. Transient
        failures are ``Outcome.RETRY``, permanent ones ``Outcome.REJECTED``; nothing raises
        for a single message's failure."""

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Flush and release the transport."""

"""The interfaces Tocsin's backends implement: :class:`Store` and :class:`Channel`.

:class:`Store` is the composite of one interface per role its callers use (schedules,
dispatch, channels, recurring, policies, tenants, keys, health). One module per backend
implements them (``tocsin.stores.sqlite``, ``tocsin.channels.kafka``...).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from typing import Any, NamedTuple

from tocsin.domain import (
    Ack,
    ApiKey,
    ChannelSpec,
    Delivery,
    Envelope,
    Expansion,
    NewSchedule,
    PayloadKind,
    Policy,
    Recurring,
    Result,
    Schedule,
    ScheduleOrder,
    Status,
    Tenant,
)
from tocsin.domain.audit import AuditEntry
from tocsin.domain.selection import BulkResult, Selection

__all__ = [
    "AuditStore",
    "BucketOwner",
    "BulkChangeStore",
    "Channel",
    "ChannelHold",
    "ChannelStats",
    "ChannelStore",
    "ClaimedRow",
    "DispatchStore",
    "FiringRecord",
    "HaltedKey",
    "HealthStore",
    "KeyStore",
    "Membership",
    "MetricsStore",
    "OperationsStore",
    "PausedChannel",
    "PolicyStore",
    "RecurringStore",
    "RunInfo",
    "ScheduleStore",
    "StatsStore",
    "Store",
    "TenantStore",
]


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
    chain_base: int = 0
    """Attempts made before this attempt chain (a re-drive starts a new chain): the retry
    limit counts ``attempt - chain_base``, while ``attempt`` (and so the delivery id) goes on."""
    terms: str | None = None
    """The schedule's delivery terms as stored (:func:`tocsin.domain.terms.terms_of`)."""
    chain_ms: int | None = None
    """When this attempt chain's first attempt started (None: this is the first)."""


class RunInfo(NamedTuple):
    """A dispatcher run: when it started, last beat, and finished its first batch (or None);
    where it runs, and its checkpoint slot (None until it joined)."""

    run: str
    started_ms: int
    beat_ms: int
    ready_ms: int | None
    host: str = ""
    pid: int = 0
    slot: int | None = None


class BucketOwner(NamedTuple):
    """Buckets ``[lo, hi]`` owned by dispatcher run ``run`` under assignment ``generation``,
    since ``since_ms``."""

    lo: int
    hi: int
    run: str
    generation: int
    since_ms: int


class Membership(NamedTuple):
    """What one look at the dispatchers' membership found or did: the owners after it, whether
    they changed (or, for a look that only reads, would), the runs fenced, and how many of
    their claims were released."""

    owners: list[BucketOwner]
    changed: bool
    fenced: list[str]
    released: int


class HaltedKey(NamedTuple):
    """An ordering key halted by a dead schedule (its channel says ``on_dead: halt``)."""

    tenant: str
    ordering_key: str
    schedule_id: str
    halted_ms: int
    reason: str | None


class PausedChannel(NamedTuple):
    """A channel whose schedules wait unclaimed until it is resumed."""

    tenant: str
    name: str
    paused_ms: int


class ChannelHold(NamedTuple):
    """A destination (a channel of a tenant) the dispatcher passes over until ``until_ms``:
    its circuit breaker is open (``reason`` ``open``; the first claim after ``until_ms`` is
    its probe) or a dispatcher's queue for it is full (``busy``): a
    :class:`~tocsin.domain.HoldReason`."""

    tenant: str
    name: str
    reason: str
    since_ms: int
    until_ms: int
    failures: int
    """Consecutive failed attempts that opened the breaker (0 for ``busy``)."""
    last_error: str | None
    holder: str = ""
    """Who holds it: ``""`` for an open breaker (one per destination); a dispatcher process
    for a full queue (each process its own row, ended by that process alone)."""


class FiringRecord(NamedTuple):
    """What became of one firing of a recurring schedule."""

    firing_ms: int
    outcome: str
    """``expanded`` (its messages were scheduled), ``skipped`` (see ``reason``), or
    ``cancelled`` (expanded, then its recurring schedule changed or was deleted)."""
    reason: str | None
    """Why it was skipped (``paused``, ``misfire: skipped``, ``misfire: coalesced``)."""
    due_ms: int | None
    """When its first message was due (a late firing's messages are re-based to the catch-up)."""
    messages: dict[str, int]
    """How many of its messages are in each status."""


class ScheduleStore(ABC):
    """Schedules as clients see them: create, read, change, cancel; halted ordering keys.

    ``tenant=None`` reads or changes any tenant's rows (an admin, the dispatcher);
    ``tenant="x"`` only tenant x's, and another tenant's id answers
    :class:`~tocsin.errors.NotFoundError` exactly like a missing one.
    """

    @abstractmethod
    def create(self, items: Sequence[NewSchedule], *, now_ms: int) -> list[tuple[Schedule, bool]]:
        """Store every item (each in its own ``tenant``) or none. Returns each schedule with
        True when newly created, False when an item's ``key`` matched an existing schedule of
        its tenant with the same request (:class:`~tocsin.errors.ConflictError` when the
        request differs)."""

    @abstractmethod
    def get(self, schedule_id: str, *, tenant: str | None = None) -> Schedule:
        """The schedule, or :class:`~tocsin.errors.NotFoundError`."""

    @abstractmethod
    def list_schedules(
        self,
        *,
        status: Status | None = None,
        channel: str | None = None,
        due_from_ms: int | None = None,
        due_to_ms: int | None = None,
        after_id: str | None = None,
        limit: int = 100,
        tenant: str | None = None,
        key: str | None = None,
        order: ScheduleOrder = ScheduleOrder.ID,
        labels: Sequence[tuple[str, str]] = (),
    ) -> list[Schedule]:
        """Schedules matching the filters, the first ``limit`` in ``order``; in id order,
        after ``after_id`` (the cursor; other orders take no cursor); ``key``: the schedule
        created with that idempotency key (one per tenant)."""

    @abstractmethod
    def cancel(self, schedule_id: str, *, now_ms: int, tenant: str | None = None) -> Schedule:
        """PENDING → CANCELLED atomically; :class:`~tocsin.errors.ConflictError` naming the
        current status when it is too late."""

    @abstractmethod
    def reschedule(self, schedule_id: str, *, now_ms: int, due_ms: int | None = None,
                   payload: bytes | None = None, payload_kind: PayloadKind | None = None,
                   headers: dict[str, str] | None = None,
                   tenant: str | None = None) -> Schedule:
        """Change a PENDING schedule's due time, payload or headers, atomically (the same
        compare-and-set as :meth:`cancel`); :class:`~tocsin.errors.ConflictError` naming the
        current status when it is too late."""

    @abstractmethod
    def deliveries(self, schedule_id: str, *,
                   tenant: str | None = None) -> list[Delivery]:
        """The attempt log of one schedule, oldest first (NotFoundError for another
        tenant's schedule)."""

    @abstractmethod
    def halted_keys(self, *, tenant: str | None = None) -> list[HaltedKey]:
        """The ordering keys halted now."""

    @abstractmethod
    def resume_key(self, *, tenant: str, ordering_key: str) -> None:
        """Let a halted key's next schedules go; :class:`~tocsin.errors.NotFoundError` when
        the key is not halted."""

    @abstractmethod
    def pending_count(self, *, tenant: str) -> int:
        """How many of ``tenant``'s schedules wait or are being delivered (PENDING and
        CLAIMED): what its quota counts."""


class DispatchStore(ABC):
    """What the dispatcher claims and acknowledges. Claims are decided by compare-and-set on
    ``status``; a claim is stamped with the dispatcher's epoch and every acknowledgement is
    fenced by it, so a superseded dispatcher can never overwrite a newer claim."""

    buckets: int
    """B, fixed when the store was created: a schedule's bucket is ``murmur3(k) % B`` where
    ``k`` is its policy, else its ordering key, else its id (see
    :func:`~tocsin.stores.rows.insert_values`)."""

    one_writer: bool = False
    """Whether the store takes one writing transaction at a time (SQLite): the dispatcher then
    hands over from one task per batch (:meth:`~tocsin.dispatcher.core.DispatchCore.window_span`),
    as claims from more would only queue for the writer."""

    @abstractmethod
    def next_epoch(self, *, run: str | None = None, now_ms: int = 0) -> int:
        """A new epoch, greater than every epoch this store has handed out; recorded as taken
        by dispatcher run ``run`` (when given) at ``now_ms``."""

    @abstractmethod
    def beat_run(self, run: str, *, now_ms: int, ready: bool = False) -> bool:
        """Record that dispatcher run ``run`` is alive at ``now_ms`` (its row made on the
        first beat); ``ready``: it has finished its first batch (kept from the first time).
        False when the run was fenced (it missed its beats, or left): the beat is refused."""

    @abstractmethod
    def join_run(self, run: str, *, now_ms: int, host: str, pid: int, stale_ms: int,
                 lock_id: int | None = None) -> int:
        """Register ``run`` (on ``host``, process ``pid``; ``lock_id``: the key of the session
        lock that shows it alive, see :meth:`hold_run_lock`) as a dispatcher that shares the
        buckets, after fencing the runs that stopped; its checkpoint slot: the lowest that no
        live run holds."""

    @abstractmethod
    def leave_run(self, run: str, *, now_ms: int, stale_ms: int) -> None:
        """``run`` gives its buckets up (the others take them at once); its claims stay its own
        until :meth:`end_run` (it sends what it holds meanwhile)."""

    @abstractmethod
    def end_run(self, run: str, *, now_ms: int = 0) -> None:
        """Mark ``run`` stopped at ``now_ms``, release its claims (the next claim takes them
        under the same attempt and delivery id) and share its buckets out between the others."""

    @abstractmethod
    def share_buckets(self, *, now_ms: int, stale_ms: int, me: str = "") -> Membership:
        """Look at the membership: fence the runs whose last beat is older than ``stale_ms`` or
        whose lock is gone (never ``me``'s), releasing their claims, and share the buckets
        out between the members under a new generation when the assignment changed
        (:mod:`tocsin.stores.sql.owners`)."""

    @abstractmethod
    def release_dead_runs(self, *, now_ms: int, stale_ms: int) -> int:
        """:meth:`share_buckets`, and how many claims it released (their lease ends now, so
        the next claim takes them with the same attempt)."""

    @abstractmethod
    def run_claims(self, run: str) -> int:
        """How many schedules ``run``'s epochs hold CLAIMED (sent or queued, not yet
        acknowledged)."""

    @abstractmethod
    def owners(self) -> list[BucketOwner]:
        """Which run owns which buckets, by range."""

    def hold_run_lock(self, lock_id: int) -> bool:
        """Hold the session lock ``lock_id`` for as long as this process lives, so its death is
        seen at once (PostgreSQL); whether the store has such locks (False: none, the beats
        alone tell). Asked again, it takes the lock again if its session was lost."""
        return False

    @abstractmethod
    def runs(self) -> list[RunInfo]:
        """The dispatcher runs that are not fenced, the newest start first."""

    @abstractmethod
    def next_due_ms(self, *, now_ms: int, lease_ms: int, run: str = "") -> int | None:
        """The earliest time something becomes claimable (a PENDING schedule's next time, or an
        expired claim's lease end), or None when nothing waits; destinations held by a full
        lane of ``run`` (or by a breaker) are passed over."""

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
        replay: bool = True,
        cover: str = "",
    ) -> list[ClaimedRow]:
        """Claim, for ``epoch``, up to ``limit`` schedules in buckets ``[bucket_lo, bucket_hi]``
        that are PENDING with next time ``<= until_ms`` (no lower bound), or CLAIMED longer ago
        than the lease, earliest first. Called again with the same epoch and range (a replay), it
        claims nothing new and returns the rows that epoch claimed and has not acknowledged.
        ``replay=False``: an epoch's further claims of the range within one task (a hand-over
        window, :mod:`tocsin.dispatcher.handover`): no replay marker, always claim anew.
        An epoch taken by a run claims only in the buckets its run owns at that moment
        (:meth:`share_buckets`), and so does :meth:`pull`. ``cover``: another run whose buckets
        this claim covers (:mod:`tocsin.dispatcher.cover`): only in those it owns, as it sees
        its holds, and only while the epoch's run is a member itself (never a replay)."""

    @abstractmethod
    def pull(self, *, epoch: int, tenant: str, channel: str, now_ms: int,
             limit: int) -> list[ClaimedRow]:
        """Claim, for ``epoch``, up to ``limit`` of one destination's unthrottled PENDING
        schedules due by ``now_ms`` (heads of their keys), earliest first, passing over the
        destination's ``busy`` holds but nothing if it is paused or its breaker is open. The
        delivery engine's puller takes a backlogged destination's next rows so, as it has
        room, while the hand-over windows' claims pass the destination over
        (:mod:`tocsin.dispatcher.engine`). Not a replay: each call claims anew."""

    @abstractmethod
    def next_pull_ms(self, *, tenant: str, channel: str, until_ms: int,
                     run: str = "") -> int | None:
        """The earliest next time ``<= until_ms`` of a schedule :meth:`pull` would take for
        this destination (``run``: in the buckets that run owns), or None (none, or the
        destination is paused or its breaker open).
        A read: a backlog that caught up asks it before it waits for its
        destination's next due instant."""

    def next_claimable_ms(self, *, bucket_lo: int, bucket_hi: int, until_ms: int, now_ms: int,
                          lease_ms: int, run: str = "") -> int | None:
        """The earliest next time ``<= until_ms`` of an unthrottled PENDING schedule in buckets
        ``[bucket_lo, bucket_hi]`` that a claim would take (head of its key, channel not
        paused), or ``now_ms`` when a claim there is older than the lease; else when the
        earliest schedule waiting on a policy can be claimed (a free token), if ``<= until_ms``
        (in any range: a claim here takes this range's part of the policy's earliest, which
        may be nothing); None when none of these. ``run``: only in the buckets it owns.
        A read: a hand-over window asks it before it waits for the next due instant."""
        times = self.claimable_times(bucket_lo=bucket_lo, bucket_hi=bucket_hi,
                                     until_ms=until_ms, now_ms=now_ms, lease_ms=lease_ms,
                                     run=run, count=1)
        return times[0] if times else None

    @abstractmethod
    def claimable_times(self, *, bucket_lo: int, bucket_hi: int, until_ms: int, now_ms: int,
                        lease_ms: int, run: str = "", count: int) -> list[int]:
        """The earliest ``count`` distinct times of :meth:`next_claimable_ms`, in order: the
        next times ``<= until_ms`` of the schedules a claim in the range would take, and when a
        policy's earliest waiting schedule can take a free token (``[now_ms]`` alone when a
        claim there is older than the lease). A hand-over window claims at each in turn
        without asking again in between (:data:`~tocsin.dispatcher.knobs.LOOK_AHEAD`)."""

    @abstractmethod
    def acknowledge(self, *, epoch: int, acks: Sequence[Ack], now_ms: int) -> int:
        """Apply each verdict to its schedule if it is still CLAIMED by ``epoch``; log every
        attempt; copy the dead to their dead-letter channels (of the schedule's tenant).
        Returns how many applied."""

    @abstractmethod
    def forget_claims(self, *, before_ms: int) -> int:
        """Delete replay markers of claims made before ``before_ms`` (their rows are long
        acknowledged or reclaimable after the lease). Returns how many were deleted."""

    @abstractmethod
    def unclaim(self, *, epoch: int, ids: Sequence[str]) -> int:
        """Hand claimed schedules back unsent: PENDING again at their next time, no attempt
        counted, a policy's token returned (only rows still CLAIMED by ``epoch``). How many."""

    @abstractmethod
    def hold_channel(self, hold: ChannelHold) -> None:
        """Pass over ``hold.tenant``'s channel ``hold.name`` in claims until ``hold.until_ms``
        (replacing the hold ``hold.holder`` had)."""

    @abstractmethod
    def unhold_channel(self, tenant: str, name: str, *, reason: str | None = None,
                       holder: str | None = None) -> bool:
        """End the channel's holds (only those of ``reason`` and ``holder``, when given);
        False when there was none."""

    @abstractmethod
    def channel_holds(self, *, tenant: str | None = None) -> list[ChannelHold]:
        """The held channels (of ``tenant``), by tenant and name."""

    @abstractmethod
    def claimed_by_channel(self, *, tenant: str | None = None) -> dict[tuple[str, str], int]:
        """CLAIMED schedules (handed to a dispatcher, not yet acknowledged) by (tenant,
        channel)."""

    def refresh_statistics(self, *, when_stale: bool = False) -> bool:
        """Refresh the planner's statistics of the schedules (``when_stale``: only when the
        table has outgrown the ones it has); whether it did. Nothing to do by default."""
        return False

    @abstractmethod
    def expire_holds(self, *, now_ms: int) -> int:
        """End the holds whose ``until_ms`` has passed (a breaker due for its probe, a queue
        whose process stopped refreshing it). How many."""


class ChannelStore(ABC):
    """Registered channels, namespaced by tenant: a schedule goes to the channel of its own
    tenant with the name it gives."""

    @abstractmethod
    def put_channel(self, spec: ChannelSpec) -> ChannelSpec:
        """Register or replace ``spec.tenant``'s channel ``spec.name``."""

    @abstractmethod
    def get_channel(self, name: str, *, tenant: str) -> ChannelSpec:
        """A registered channel, or :class:`~tocsin.errors.NotFoundError`."""

    @abstractmethod
    def list_channels(self, *, tenant: str | None = None,
                      kinds: Collection[str] | None = None) -> list[ChannelSpec]:
        """Every registered channel (of ``tenant``; of one of ``kinds``), by tenant and
        name."""

    @abstractmethod
    def channel_kinds(self) -> set[str]:
        """The kinds of the registered channels, of every tenant (a read of one column:
        a dispatcher asks every few seconds, however many channels there are)."""

    @abstractmethod
    def delete_channel(self, name: str, *, tenant: str) -> None:
        """Forget a channel (its schedules then die on delivery)."""

    @abstractmethod
    def channels_version(self) -> int:
        """A number that changes whenever a channel is registered, replaced or deleted, or a
        tenant's settings change (what a channel's spec is read with): a cache of specs is
        good while it stays the same (one read, however many destinations)."""


class RecurringStore(ABC):
    """Recurring schedules and their expansion into schedules."""

    @abstractmethod
    def create_recurring(self, recurring: Recurring, *, now_ms: int) -> Recurring:
        """Store a new recurring schedule; its firings after ``now_ms`` will be expanded.
        :class:`~tocsin.errors.ValidationError` when its tenant has no such policy."""

    @abstractmethod
    def get_recurring(self, recurring_id: str, *, tenant: str | None = None) -> Recurring:
        """The recurring schedule, or :class:`~tocsin.errors.NotFoundError`."""

    @abstractmethod
    def list_recurring(self, *, tenant: str | None = None, after_id: str | None = None,
                       limit: int = 100) -> list[Recurring]:
        """Recurring schedules in id order, after ``after_id`` (the cursor)."""

    @abstractmethod
    def update_recurring(self, recurring: Recurring, *, now_ms: int) -> Recurring:
        """Replace the rule, message and pause state of ``recurring.id`` (NotFoundError unless
        it belongs to ``recurring.tenant``) in one transaction: the revision goes up, firings
        after ``now_ms`` whose messages are still PENDING are cancelled, a failure is
        forgotten, and expansion starts again from ``now_ms`` under the new rule."""

    @abstractmethod
    def delete_recurring(self, recurring_id: str, *, now_ms: int,
                         tenant: str | None = None) -> int:
        """Forget a recurring schedule and cancel its PENDING messages of firings after
        ``now_ms``; returns how many were cancelled."""

    @abstractmethod
    def recurring_firings(self, recurring_id: str, *, after_ms: int = -1, limit: int = 100,
                          tenant: str | None = None) -> list[FiringRecord]:
        """The firings after ``after_ms`` expanded or skipped so far, oldest first."""

    @abstractmethod
    def fire_recurring(self, recurring: Recurring, items: Sequence[NewSchedule], *,
                       now_ms: int, fresh_only: bool) -> int:
        """Store the messages ``items`` of firings of ``recurring`` fired by hand
        (:mod:`tocsin.firing`), in one transaction, each at most once (by id); with
        ``fresh_only``, a firing the store holds any message of (whatever made it) is passed
        over. How many firings were stored."""

    @abstractmethod
    def recurring_due(self, *, bucket_lo: int, bucket_hi: int, now_ms: int,
                      limit: int) -> list[Recurring]:
        """Recurring schedules of buckets ``[bucket_lo, bucket_hi]`` due for expansion."""

    @abstractmethod
    def next_expansion_ms(self) -> int | None:
        """When some recurring schedule is next due for expansion (None: none is)."""

    @abstractmethod
    def record_expansions(self, expansions: Sequence[tuple[Recurring, Expansion,
                                                           Sequence[NewSchedule], int | None]],
                          *, now_ms: int) -> int:
        """For each (recurring as read, its expansion, the schedules of its firings, when to
        expand it next), in one transaction: if the recurring still has the revision and
        ``expanded_until_ms`` it was read with, move it on, insert the schedules (ids that
        exist already are left alone) and record the skipped firings. Returns how many applied."""

    @abstractmethod
    def fail_recurring(self, recurring_id: str, *, reason: str, now_ms: int) -> Recurring:
        """Mark a recurring schedule failed with ``reason``: it is no longer due for expansion
        (until :meth:`update_recurring` changes it) and blocks no other one."""


class PolicyStore(ABC):
    """Throttling policies, namespaced by tenant, and the tokens deliveries hold."""

    @abstractmethod
    def put_policy(self, policy: Policy, *, now_ms: int) -> Policy:
        """Register or change ``policy.tenant``'s policy (tokens held stay held)."""

    @abstractmethod
    def get_policy(self, name: str, *, tenant: str) -> Policy:
        """A policy, or :class:`~tocsin.errors.NotFoundError`."""

    @abstractmethod
    def list_policies(self, *, tenant: str | None = None) -> list[Policy]:
        """Every policy (of ``tenant``), by tenant and name."""

    @abstractmethod
    def delete_policy(self, name: str, *, tenant: str) -> None:
        """Forget a policy; :class:`~tocsin.errors.ConflictError` while schedules wait on it
        or recurring schedules name it."""

    @abstractmethod
    def in_flight(self, name: str, *, tenant: str, now_ms: int) -> int:
        """How many of the policy's tokens are held now."""

    @abstractmethod
    def release(self, delivery: str, *, now_ms: int, tenant: str | None = None) -> bool:
        """Return the token ``delivery`` (of ``tenant``) holds; False when it holds none
        (already returned, its lease ran out, no such delivery, or another tenant's)."""


class TenantStore(ABC):
    """Tenant settings."""

    @abstractmethod
    def put_tenant(self, tenant: Tenant, *, now_ms: int) -> Tenant:
        """Configure a tenant (its durability applies to its creates from now on)."""

    @abstractmethod
    def get_tenant(self, name: str) -> Tenant:
        """A tenant's settings; the defaults (``configured=False``) for one never configured."""

    @abstractmethod
    def list_tenants(self) -> list[Tenant]:
        """Every configured tenant, by name."""


class KeyStore(ABC):
    """API keys, stored by the digest of their secret."""

    @abstractmethod
    def put_key(self, key: ApiKey) -> ApiKey:
        """Store a new key; :class:`~tocsin.errors.ConflictError` when its id or digest is
        taken."""

    @abstractmethod
    def key_by_digest(self, digest: str) -> ApiKey | None:
        """The key with this digest (revoked or not: see :attr:`ApiKey.active`), or None."""

    @abstractmethod
    def list_keys(self, *, tenant: str | None = None) -> list[ApiKey]:
        """Every key (bound to ``tenant``), oldest first."""

    @abstractmethod
    def revoke_key(self, key_id: str, *, now_ms: int) -> ApiKey:
        """Revoke a key (a revoked key keeps its first revocation time);
        :class:`~tocsin.errors.NotFoundError` when unknown."""

    @abstractmethod
    def open_session(self, digest: str, *, key_digest: str, now_ms: int,
                     expires_ms: int) -> None:
        """Keep a dashboard session (the digest of its token) opened with the key whose digest
        is ``key_digest``, until ``expires_ms``; sessions expired by ``now_ms`` are dropped, and
        so are the key's oldest beyond its 32 newest."""

    @abstractmethod
    def session_key(self, digest: str, *, now_ms: int) -> ApiKey | None:
        """The key of an unexpired session (revoked or not: see :attr:`ApiKey.active`), or
        None."""

    @abstractmethod
    def end_session(self, digest: str) -> None:
        """Forget a session (signing out); nothing when there is none."""


class OperationsStore(ABC):
    """What an operator does: send dead schedules again, pause and resume channels."""

    @abstractmethod
    def redrive(self, schedule_id: str, *, now_ms: int, tenant: str | None = None) -> Schedule:
        """DEAD → PENDING, due now, as a new attempt chain (its attempt log is kept and attempt
        numbers go on, so no delivery id is reused; the retry limit counts the new chain's
        attempts). An ordering key the schedule halted is resumed.
        :class:`~tocsin.errors.ConflictError` naming the status unless it is DEAD."""

    @abstractmethod
    def redrive_where(self, *, now_ms: int, tenant: str | None = None,
                      channel: str | None = None, due_from_ms: int | None = None,
                      due_to_ms: int | None = None, limit: int = 10_000,
                      chunk: int = 500, status: Status = Status.DEAD,
                      labels: Sequence[tuple[str, str]] = ()) -> int:
        """:meth:`redrive` up to ``limit`` schedules of ``status`` (DEAD or EXPIRED) matching
        the filters (due in ``[due_from_ms, due_to_ms)``, carrying every one of ``labels``),
        ``chunk`` per transaction; returns how many."""

    @abstractmethod
    def pause_channel(self, name: str, *, tenant: str, now_ms: int) -> PausedChannel:
        """Stop claiming the channel's schedules (they wait, PENDING; those already claimed
        finish). :class:`~tocsin.errors.NotFoundError` when the channel is not registered."""

    @abstractmethod
    def resume_channel(self, name: str, *, tenant: str) -> bool:
        """Claim the channel's schedules again; False when it was not paused."""

    @abstractmethod
    def paused_channels(self, *, tenant: str | None = None) -> list[PausedChannel]:
        """The paused channels (of ``tenant``), by tenant and name."""


class MetricsStore(ABC):
    """Counters that add up across any number of dispatchers and API replicas (rows the store
    adds to atomically, summed when read), and the gauges read at scrape time."""

    @abstractmethod
    def add_counts(self, counts: Mapping[tuple[str, str], int]) -> None:
        """Add to the counters ``(name, labels as canonical JSON)``, in one transaction.
        (:meth:`DispatchStore.acknowledge` adds the delivery counters in its own.)"""

    @abstractmethod
    def counter_totals(self) -> dict[tuple[str, str], int]:
        """Every counter's value, by ``(name, labels)``."""

    @abstractmethod
    def due_between(self, *, from_ms: int, to_ms: int, tenant: str | None = None) -> int:
        """How many PENDING schedules are next due in ``[from_ms, to_ms)``."""

    @abstractmethod
    def pending_by_slot(self, *, from_ms: int, to_ms: int, slot_ms: int,
                        tenant: str | None = None) -> list[tuple[int, int]]:
        """PENDING schedules next due in ``[from_ms, to_ms)`` counted per ``slot_ms``:
        ``(slot start, count)`` of the non-empty slots, in time order."""

    @abstractmethod
    def finished_by_slot(self, *, from_ms: int, to_ms: int, slot_ms: int,
                         tenant: str | None = None) -> list[tuple[int, Status, int]]:
        """Schedules that finished (DELIVERED, CANCELLED, DEAD) in ``[from_ms, to_ms)``,
        counted per ``slot_ms`` and status: ``(slot start, status, count)``, in time order."""

    @abstractmethod
    def dead_count(self, *, tenant: str | None = None) -> int:
        """How many schedules (of ``tenant``) are DEAD."""

    @abstractmethod
    def tokens_held(self, *, now_ms: int,
                    tenant: str | None = None) -> dict[tuple[str, str], int]:
        """Live policy tokens by ``(tenant, policy)``."""
class BulkChangeStore(ABC):
    """Cancel and reschedule every waiting schedule of a :class:`Selection`, in chunks of
    ``chunk`` per transaction, each row by the compare-and-set of a single change (PENDING
    only). ``limit`` bounds the schedules looked at (None: all of them, for the Spark job)."""

    @abstractmethod
    def cancel_where(self, selection: Selection, *, now_ms: int, limit: int | None = 10_000,
                     chunk: int = 500) -> BulkResult:
        """Cancel the selection's PENDING schedules; those firing are counted ``too_late``."""

    @abstractmethod
    def reschedule_where(self, selection: Selection, *, now_ms: int, due_ms: int | None = None,
                         shift_ms: int | None = None, limit: int | None = 10_000,
                         chunk: int = 500) -> BulkResult:
        """Move the selection's PENDING schedules to ``due_ms``, or each by ``shift_ms``
        (exactly one of the two); those firing are counted ``too_late``."""


class ChannelStats(NamedTuple):
    """The live figures of one channel of one tenant (:meth:`StatsStore.stats`)."""

    tenant: str
    channel: str
    pending: int
    due_soon: int
    """PENDING and due within the look-ahead."""
    delivered: int
    """Finished within the window, by outcome."""
    dead: int
    cancelled: int
    retried: int
    """Attempts within the window that failed and will be tried again."""
    lateness_ms: tuple[int, int, int, int] | None
    """p50, p95, p99 and max lateness of the window's most recent deliveries (None: none)."""
    expired: int = 0
    """Finished within the window as EXPIRED."""


class StatsStore(ABC):
    """Cheap live figures: bounded windows over indexes only."""

    @abstractmethod
    def stats(self, *, now_ms: int, window_ms: int, ahead_ms: int,
              tenant: str | None = None,
              labels: Sequence[tuple[str, str]] = ()) -> list[ChannelStats]:
        """Per (tenant, channel): what waits, what falls due within ``ahead_ms``, what finished
        and how late deliveries were within the last ``window_ms``; of the schedules carrying
        every one of ``labels`` (a selector's pairs) when given."""


class HealthStore(ABC):
    """Heartbeats, figures for metrics, and the connection itself."""

    schema_version: int
    """The newest migration applied."""

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


class AuditStore(ABC):
    """The audit log: who changed what, when and from where."""

    @abstractmethod
    def record_audit(self, entry: AuditEntry) -> None:
        """Keep ``entry``."""

    @abstractmethod
    def list_audit(self, *, tenant: str | None = None, key_id: str | None = None,
                   action: str | None = None, since_ms: int | None = None,
                   until_ms: int | None = None, after_id: str | None = None,
                   limit: int = 100) -> list[AuditEntry]:
        """Entries matching every filter given (``action``: a prefix, as ``POST /v1/channels``;
        ``[since_ms, until_ms)``), oldest first, after ``after_id``."""

    @abstractmethod
    def delete_audit(self, ids: Sequence[str]) -> int:
        """Forget the entries ``ids`` (archived); how many there were."""


class Store(ScheduleStore, DispatchStore, ChannelStore, RecurringStore, PolicyStore,
            TenantStore, KeyStore, OperationsStore, MetricsStore, BulkChangeStore, StatsStore,
            HealthStore, AuditStore):
    """The system of record: every role in one object. Every state change is one atomic
    statement or transaction, and every error is a :mod:`tocsin.errors` error
    (:class:`~tocsin.errors.StoreError` when the database fails). Callers may annotate the
    narrower role they use."""


class Channel(ABC):
    """A transport. ``send`` hands over a batch and answers for every envelope in it;
    ``send_async`` does the same for a caller on an event loop.

    A channel whose client is asynchronous (``is_async``: the webhook channel) sends on the
    process's one channel loop and awaits there without blocking it; any other channel's
    ``send_async`` runs its blocking ``send`` on the process's bounded pool of threads
    (:mod:`tocsin.blocking`), so a caller can await every destination alike and never
    holds a thread per destination."""

    spec: ChannelSpec
    is_async: bool = False
    """Whether :meth:`send_async` is native (awaits I/O on the channel loop) rather than the
    blocking :meth:`send` run on the shared pool."""
    quick_build: bool = False
    """Whether making one does no I/O and takes well under a millisecond (the webhook
    channel: 0.3 ms): the dispatcher's channel cache builds it in the caller, not on its pool
    of build threads."""

    @abstractmethod
    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        """Deliver the envelopes; one :class:`Result` per envelope, in any order. Transient
        failures are ``Outcome.RETRY``, permanent ones ``Outcome.REJECTED``; nothing raises
        for a single message's failure."""

    async def send_async(self, envelopes: Sequence[Envelope]) -> list[Result]:
        """:meth:`send`, awaited: by default the blocking ``send`` on the process's bounded
        pool of threads (``channel_threads``); an asynchronous channel overrides it."""
        import asyncio

        from tocsin.blocking import blocking_pool

        return await asyncio.get_running_loop().run_in_executor(
            blocking_pool(), self.send, envelopes)

    def close(self) -> None:  # noqa: B027 (optional hook)
        """Flush and release the transport: nothing of this destination (no thread, no
        connection of its own) outlives it."""

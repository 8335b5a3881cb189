"""The dispatcher's logic, free of Spark. One micro-batch is::

    next_offset ──▶ parts ──▶ claim (each bucket range) ──▶ deliver ──▶ record_batch
    (driver: due?  (driver)    (executor: epoch-fenced     (executor:    (driver: the beat)
     new epoch)                 claim, replay-safe)         the engine:
                                                            send, verdict,
                                                            acknowledge)

The Spark source and sink (:mod:`tocsin.dispatcher.source`, :mod:`tocsin.dispatcher.sink`) call
these methods; :mod:`tocsin.dispatcher.local` calls them in one process, stepped by a clock.
Time comes only from the :class:`~tocsin.clock.Clock` given. Every store call of the delivery
path is made here (the store's dispatch role, in one place).
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Sequence
from functools import partial
from typing import NamedTuple, TypeVar

from tocsin import tracing
from tocsin.abc import ChannelHold, ClaimedRow, Store
from tocsin.clock import Clock
from tocsin.dispatcher.beat import DISPATCHER, SOURCE, batch_counts, beat_info
from tocsin.dispatcher.channel_cache import ChannelCache
from tocsin.dispatcher.deliver import Tally
from tocsin.dispatcher.engine import Engine
from tocsin.dispatcher.knobs import (
    CLAIM_MARKER_KEEP_MS,
    CLAIM_MARKER_PRUNE_MS,
    CLAIM_ROWS,
    READER_LAG_MS,
    WAKE_AHEAD_MS,
    WORK_OUT_BATCH_MS,
    WORKER_IDLE_MS,
)
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.preflight import UndeliverableHolds
from tocsin.dispatcher.runs import RUN_BEAT_MS, RUN_STALE_MS
from tocsin.dispatcher.terms import with_tenant_events
from tocsin.dispatcher.workers import SteppedWorkers, Workers
from tocsin.domain import Ack, ChannelSpec, HoldReason
from tocsin.errors import NotFoundError, StoreError
from tocsin.stores.retry import retrying

__all__ = ["CLAIM_MARKER_KEEP_MS", "CLAIM_ROWS", "READER_LAG_MS", "WAKE_AHEAD_MS",
           "WORKER_IDLE_MS", "BucketSpan", "DispatchCore", "Offset", "bucket_ranges",
           "channel_spec", "log"]  # the knobs re-exported for the modules that read them here

T = TypeVar("T")
Offset = dict[str, int]
"""A batch's end: ``{"until": ms, "epoch": n}``; the same offset twice means no batch. A run's
first batch runs even when nothing is due (``"warm": 1``): it starts the workers and opens the
channels, and ``/readyz`` waits for it."""
log = logging.getLogger("tocsin.dispatcher")
def bucket_ranges(buckets: int, parts: int) -> list[tuple[int, int]]:
    """Split ``buckets`` into at most ``parts`` contiguous, nearly equal, inclusive ranges."""
    parts = max(1, min(parts, buckets))
    edges = [round(i * buckets / parts) for i in range(parts + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(parts)]


def channel_spec(store: Store, name: str, tenant: str) -> ChannelSpec | None:
    """``tenant``'s registered channel ``name``, or None (for :class:`ChannelCache`); a
    channel that names no ``events`` channel takes its tenant's."""
    try:
        spec = store.get_channel(name, tenant=tenant)
    except NotFoundError:
        return None
    return with_tenant_events(spec, store)


class BucketSpan(NamedTuple):
    """One task's share of a batch: buckets ``[lo, hi]`` of ``epoch``, due by ``until_ms``,
    at most ``limit`` rows."""

    epoch: int
    lo: int
    hi: int
    until_ms: int
    limit: int


class DispatchCore:
    """Claim → deliver → verdict → acknowledge over one store, with time from ``clock``.

    ``channels`` defaults to live channels built from the store's specs; ``rng`` draws the
    retry jitter (seed it for repeatable back-off). ``workers`` run the delivery engine
    (:mod:`tocsin.dispatcher.engine`): its own fixed threads in a dispatcher process
    (:class:`~tocsin.dispatcher.workers.ThreadedWorkers`), or, by default, the caller's thread,
    stepped, so that :meth:`deliver` returns with its rows delivered (the in-process runner,
    tests on a manual clock)."""

    def __init__(self, store: Store, *, options: DispatchOptions, clock: Clock,
                 channels: ChannelCache | None = None,
                 rng: random.Random | None = None, workers: Workers | None = None) -> None:
        self.store = store
        self.options = options
        self.clock = clock
        self.channels = channels or ChannelCache(partial(channel_spec, store), clock=clock,
                                                 version=store.channels_version)
        self.rng = rng or random.Random()
        self.engine = Engine(self, settings=options.engine,
                             workers=workers if workers is not None else SteppedWorkers())
        self.undeliverable = UndeliverableHolds(store, run=options.run, clock=clock)
        """Holds the destinations this machine cannot deliver to (:meth:`watch_runs`)."""
        self._last_beat_ms: int | None = None
        self._last_prune_ms: int | None = None
        self._last_runs_ms: int | None = None
        self._first_batch = True
        self._last_batch_ms: int | None = None
        self._work_checked_ms = -WORK_OUT_BATCH_MS
        self._warm = False
        self._ready = False

    def next_offset(self, start: Offset) -> Offset:
        """The next batch's offset, or ``start`` when nothing is claimable within the hand-over
        window (or the store is down: no batch now, ask again next trigger). Beats
        ``dispatcher-source`` when idle."""
        opts, now = self.options, self.clock.now_ms()
        try:
            if not opts.relay:  # the main query's source beats and watches runs, not both
                if self._last_beat_ms is None or now - self._last_beat_ms > opts.idle_beat_ms:
                    self.store.beat(SOURCE, now_ms=now)
                    self._last_beat_ms = now
                self.watch_runs(now)
            due = self.store.next_due_ms(now_ms=now, lease_ms=opts.lease_ms, run=opts.run)
            if self._first_batch:  # the warm-up batch runs even when nothing is due
                self._first_batch = False
                self._last_batch_ms = now
                return {"until": now, "epoch": self.store.next_epoch(run=opts.run, now_ms=now),
                        "warm": 1}
            idle = due is None or due > now + opts.hand_over_ms + self._wake_ahead_ms(now)
            if idle and not self._batch_anyway(now):
                return start
            self._last_batch_ms = now  # a batch now: something is due, or to keep warm
            return {"until": now, "epoch": self.store.next_epoch(run=opts.run, now_ms=now)}
        except StoreError as exc:
            log.warning("dispatcher: store unavailable, no batch: %s", exc)
            return start

    def _batch_anyway(self, now: int) -> bool:
        """Whether an idle dispatcher runs a batch now: every ``keep_warm_ms`` when set, and
        every :data:`WORK_OUT_BATCH_MS` while this run's engines hold claimed rows (their
        workers must not look idle to Spark)."""
        opts, last = self.options, self._last_batch_ms
        if last is None:
            return False
        if opts.keep_warm_ms and now - last >= opts.keep_warm_ms:
            return True
        if (not opts.run or opts.relay or now - last < WORK_OUT_BATCH_MS
                or now - self._work_checked_ms < WORK_OUT_BATCH_MS):
            return False
        self._work_checked_ms = now  # asked at most that often (an indexed count)
        return self.store.run_claims(opts.run) > 0

    def _wake_ahead_ms(self, now: int) -> int:
        """How much earlier than its window a batch starts: :data:`WAKE_AHEAD_MS` when Spark
        may have stopped the Python workers since the last batch (a new one starts in well
        under a second, but the first schedule after a quiet spell should not wait for it)."""
        last = self._last_batch_ms
        cold = last is None or now - last >= WORKER_IDLE_MS - WAKE_AHEAD_MS
        return WAKE_AHEAD_MS if cold else 0

    def watch_runs(self, now: int) -> None:
        """At most every :data:`RUN_BEAT_MS`: beat this run, fence the runs whose beat stopped
        (their claims go out at the next claim, under the same delivery ids) and share the
        buckets out between the members (:meth:`~tocsin.abc.DispatchStore.share_buckets`),
        unless the dispatcher process's own thread does (``run_beat``). Holds the destinations
        this machine cannot deliver to, before any claim (:mod:`tocsin.dispatcher.preflight`)."""
        self.undeliverable.check()
        if self._last_runs_ms is not None and now - self._last_runs_ms < RUN_BEAT_MS:
            return
        self._last_runs_ms = now
        if not self.options.run_beat:  # else the dispatcher process's RunBeat does both
            if self.options.run:
                self.store.beat_run(self.options.run, now_ms=now)
            released = self.store.share_buckets(now_ms=now, stale_ms=RUN_STALE_MS,
                                                me=self.options.run).released
            if released:
                log.warning("dispatcher: released %d claims of dispatcher runs that stopped "
                            "beating", released)
        self.store.expire_holds(now_ms=now)  # breakers due a probe, holds of stopped processes
        # A burst that doubled the table leaves PostgreSQL planning the claim for the table it
        # was (a due-time index scan past every row of the burst for each trickle's claim)
        # until autovacuum looks, up to a minute later.
        if self.store.refresh_statistics(when_stale=True):
            log.info("dispatcher: refreshed the store's statistics (the schedules grew)")

    def warm(self) -> None:
        """Open every registered channel whose build does I/O once in this process (the first
        batch does it, so the first schedules do not wait for connections), all at once,
        waiting one build deadline in all
        (:meth:`~tocsin.dispatcher.channel_cache.ChannelCache.warm`); a channel that cannot be
        built is left for its first delivery to report."""
        if self._warm:
            return
        self._warm = True
        try:
            specs = self.store.list_channels()
        except StoreError as exc:
            log.warning("dispatcher: could not list channels to open: %s", exc)
            return
        for (tenant, name), error in self.channels.warm(specs).items():
            # reported again, per delivery, when it is used
            log.warning("dispatcher: channel %s/%s does not open: %r", tenant, name, error)

    def parts(self, start: Offset, end: Offset) -> list[BucketSpan]:
        """The batch ``(start, end]`` split into bucket ranges, each with its share of the cap;
        the warm-up batch is one range over every bucket, with one range's share: one task
        starts one reader and one writer instead of one per partition, on the path to ready
        (the next batch's tasks start theirs from the warm daemon, a window ahead).

        When hand-over windows follow, a batch claims only what has been due for
        :data:`READER_LAG_MS` or more: what the windows did not take (a backlog, a start after
        downtime, a dead run's claims). A schedule that fell due just before the batch is
        the relay's to hand over at its instant, or the batch's own window's first claim: the
        batch's rows reach its windows only through Spark, from the reader's task to the
        writer's, and a schedule due at the batch's start went out 190-340 ms late.

        A batch with windows is one task over every bucket, whatever the store and the
        partitions: one window holds them all (:meth:`window_span`), and other tasks would only
        claim what had waited a second in their ranges. Each task is a Python worker's turn
        and the JVM's; in a 200 000-row burst on SQLite the JVM used 0.63-0.91 s with one task
        a batch, 1.01-1.27 s with four."""
        if start == end:
            return []
        if end.get("warm"):
            return [self._every_bucket(end["epoch"], end["until"])]
        windows = self.options.hand_over_ms > 0
        until = end["until"] - (READER_LAG_MS if windows else 0)
        if windows:
            return [self._every_bucket(end["epoch"], until)]
        return [self.span(p, epoch=end["epoch"], until_ms=until)
                for p in range(len(bucket_ranges(self.store.buckets, self.options.partitions)))]

    def _every_bucket(self, epoch: int = 0, until_ms: int = 0) -> BucketSpan:
        """One task's span over every bucket, with one range's share of the cap."""
        return self.span(0, epoch=epoch, until_ms=until_ms)._replace(lo=0,
                                                                    hi=self.store.buckets - 1)

    def span(self, partition: int, *, epoch: int = 0, until_ms: int = 0) -> BucketSpan:
        """Partition ``partition``'s bucket range with its share of the batch cap, at most
        :data:`CLAIM_ROWS` when a hand-over window follows (it claims the rest)."""
        ranges = bucket_ranges(self.store.buckets, self.options.partitions)
        lo, hi = ranges[partition]
        limit = math.ceil(self.options.batch_cap / len(ranges))
        if self.options.hand_over_ms > 0:
            limit = min(limit, CLAIM_ROWS)
        return BucketSpan(epoch, lo, hi, until_ms, limit)

    def window_span(self, partition: int) -> BucketSpan | None:
        """The buckets task ``partition``'s hand-over window holds: every bucket for the first
        task, none for the others (a window claims only in the buckets its run owns).
        On SQLite, windows in four worker processes only queued for the writer, and each
        re-read the pages the others had just changed: a 100 000-row drain by four processes
        went at 9 900/s and 76 us of CPU a row, by one at 17 100/s and 56 us. On PostgreSQL,
        four windows polling and claiming side by side made webhooks due at 200/s late by
        p99 984 ms, one window by 102 ms (``bench/run lateness``, same machine, minutes
        apart)."""
        if self.options.partitions == 1:
            return self.span(partition)
        return self._every_bucket() if partition == 0 else None

    def claim(self, span: BucketSpan) -> list[ClaimedRow]:
        """Claim one range's due rows for its epoch (a replay returns the same rows)."""
        with tracing.span("tocsin.claim", attributes={"tocsin.epoch": span.epoch}):
            return retrying(lambda: self.store.claim(
                epoch=span.epoch, bucket_lo=span.lo, bucket_hi=span.hi,
                until_ms=span.until_ms, now_ms=self.clock.now_ms(),
                lease_ms=self.options.lease_ms, limit=span.limit),
                what="claim", clock=self.clock)

    def deliver(self, rows: Sequence[ClaimedRow]) -> Tally:
        """Hand claimed rows to the delivery engine, which sends them, judges each answer and
        acknowledges every verdict under its epoch; the tally of what it finished since the
        last call (stepped, that includes these rows)."""
        return self.engine.submit(rows)

    def collect(self) -> Tally:
        """What the engine finished since the last call."""
        return self.engine.collect()

    def pause_until(self, ms: int) -> None:
        """Wait until the clock reads ``ms``; a chunk that finishes ends the wait early (a
        key's next schedule may be claimable now)."""
        self.engine.start()
        self.engine.workers.pause_until(ms)

    # -- the store calls of the delivery path ---------------------------------------------

    def acknowledge(self, by_epoch: dict[int, list[Ack]]) -> Tally:
        """Apply verdicts under their epochs; a tally of the ``fenced`` ones (claimed since by
        a newer epoch)."""
        tally = Tally()
        for epoch, acks in by_epoch.items():
            with tracing.span("tocsin.acknowledge", attributes={
                    "tocsin.epoch": epoch, "tocsin.rows": len(acks)}):
                applied = retrying(lambda e=epoch, a=acks: self.store.acknowledge(  # type: ignore[misc]
                    epoch=e, acks=a, now_ms=self.clock.now_ms()), what="acknowledge",
                    clock=self.clock)
            tally.fenced += len(acks) - applied
        return tally

    def unclaim(self, rows: Sequence[ClaimedRow]) -> None:
        """Hand rows back unsent (PENDING again, no attempt spent), by their epochs; rows
        that cannot be handed back now are left to the lease (logged)."""
        by_epoch: dict[int, list[str]] = {}
        for row in rows:
            by_epoch.setdefault(row.epoch, []).append(row.id)
        for epoch, ids in by_epoch.items():
            try:
                self.store.unclaim(epoch=epoch, ids=ids)
            except StoreError as exc:
                log.warning("dispatcher: could not hand back %d rows: %s", len(ids), exc)

    def hold(self, hold: ChannelHold) -> None:
        """Pass over a destination in claims until ``hold.until_ms``. A busy hold names this
        run (``holder@run``): it passes the destination over only in the run's buckets, which
        its pulls take (:mod:`tocsin.stores.sql.owners`)."""
        if hold.reason == HoldReason.BUSY:
            hold = hold._replace(holder=self._run_holder(hold.holder))
        self.store.hold_channel(hold)

    def unhold(self, tenant: str, name: str, *, reason: HoldReason,
               holder: str | None = None) -> None:
        """End a destination's hold of ``reason`` (and ``holder``)."""
        self.store.unhold_channel(tenant, name, reason=reason,
                                  holder=None if holder is None else self._run_holder(holder))

    def _run_holder(self, holder: str) -> str:
        """A busy hold's holder with this run's id (``host:pid@run``)."""
        return f"{holder}@{self.options.run}" if self.options.run and holder else holder

    def pull(self, *, epoch: int, tenant: str, channel: str, now_ms: int,
             limit: int) -> list[ClaimedRow]:
        """Claim one destination's next due rows (its backlog) for ``epoch``."""
        with tracing.span("tocsin.claim", attributes={"tocsin.epoch": epoch,
                                                     "tocsin.channel": channel}):
            return self.store.pull(epoch=epoch, tenant=tenant, channel=channel,
                                   now_ms=now_ms, limit=limit)

    def busy_elsewhere(self, me: str) -> list[tuple[str, str]]:
        """The destinations another process of this run than ``me`` holds busy (it pulls
        their backlog, or has a full queue), once each. Another run's hold passes them over
        only in that run's buckets: this run's claims take them here anyway."""
        mine, run = self._run_holder(me), self.options.run
        return sorted({(h.tenant, h.name) for h in self.store.channel_holds()
                       if h.reason == HoldReason.BUSY and h.holder != mine
                       and (not run or h.holder.endswith(f"@{run}"))})

    def next_pull_ms(self, *, tenant: str, channel: str, until_ms: int) -> int | None:
        """When the destination's next row falls due, up to ``until_ms`` (None: none)."""
        return self.store.next_pull_ms(tenant=tenant, channel=channel, until_ms=until_ms,
                                       run=self.options.run)  # what its pulls may take

    def next_epoch(self, now_ms: int) -> int:
        """A new epoch of this run."""
        return self.store.next_epoch(run=self.options.run, now_ms=now_ms)

    def tenant_weight(self, tenant: str) -> int:
        """``tenant``'s weight (its destinations' room is this many times larger)."""
        return self.store.get_tenant(tenant).weight

    def record_batch(self, batch_id: int, tally: Tally, *, started_ms: int) -> None:
        """Beat ``dispatcher`` with the batch's figures and add its duration to the
        batch counters (lost, not fatal, when the store is down: the batch itself is done).
        Running totals are the store's counters, never a read-then-write of the beat."""
        ended = self.clock.now_ms()
        try:
            self.store.beat(DISPATCHER, now_ms=ended, info=beat_info(
                batch_id=batch_id, batch_ms=ended - started_ms, tally=tally))
            self.store.add_counts(batch_counts(ended - started_ms))
            if self.options.run and not self._ready:  # the run's first batch is done
                self.store.beat_run(self.options.run, now_ms=ended, ready=True)
                self._ready = True
        except StoreError as exc:
            log.warning("dispatcher: could not record batch %d: %s", batch_id, exc)

    def prune(self) -> None:
        """Forget replay markers older than a day, at most every few minutes."""
        now = self.clock.now_ms()
        if self._last_prune_ms is not None and now - self._last_prune_ms <= CLAIM_MARKER_PRUNE_MS:
            return
        try:
            self.store.forget_claims(before_ms=now - CLAIM_MARKER_KEEP_MS)
        except StoreError as exc:  # housekeeping: the next commit tries again
            log.warning("dispatcher: could not prune claim markers: %s", exc)
            return
        self._last_prune_ms = now

    def close(self) -> None:
        """Stop the engine (an ordered stop: hand back, finish, join), then close the live
        channels (the store is the caller's)."""
        self.engine.close()
        self.channels.close()

"""Lanes: a slow destination waits alone.

A *destination* is one channel of one tenant. In each dispatcher process every destination
with work has a lane: a queue of claimed schedules, its own thread that hands them to the
channel a chunk at a time and judges each answer, a second thread that acknowledges the
verdicts under their epochs, and a circuit breaker (:mod:`tocsin.dispatcher.breaker`)::

    task (claim at the due instant) ──submit──▶ lane A: queue ─▶ send ─▶ verdict ─▶ acknowledger
                                     └────────▶ lane B: queue ─▶ send ─▶ ...   (threads of its own)

A task hands its claimed rows to the lanes and goes straight back to its window: what a slow
destination has in flight holds neither the task, nor the batch, nor the next batch, nor any
other destination. A lane's sends do not wait for its acknowledgements either: the verdicts
go to the lane's acknowledger, which writes those that have gathered in one transaction
while the lane sends its next chunk (beside a burst, the store's writer is busy, and a
trickle's next schedule waited for its last one's acknowledgement). A lane runs at most
:data:`AHEAD_CHUNKS` chunks ahead of its acknowledgements.

Rows in a lane stay CLAIMED under the epoch that claimed them until acknowledged, so the rules
are those of any claim: a cancel after the claim answers 409; a verdict is fenced by the epoch;
a crash leaves them to the lease, or to a dead run's release, and they go out again under the
same delivery id.

Bounds, so nothing waits in a lane for long:

* **Deadline.** Every send ends within ``send_timeout_max_seconds`` (each channel caps its own
  timeouts, :mod:`tocsin.channels.limits`); a lane stops waiting for a send a little after that
  (answers RETRY for it, drops the channel, builds a new one) as the last guard.
* **Room.** A lane's holds and their ends are written by its acknowledger, never by the task
  that submits (a write waits for the store's writer, and the task's next claim would wait
  with it). A lane takes about ``lane_seconds`` of its own measured sending (at least
  ``lane_min_rows``). When its queue is full it *holds* its destination in the store (reason
  ``busy``): claims pass over the destination's schedules, which wait PENDING, so the claims of
  every other destination go on at their due instants (the fair share: a burst of one destination
  never fills the task's claims while another has work due), and the hold ends when the queue
  is half empty.
* **Breaker.** When the breaker opens, the lane holds its destination (reason ``open``) until
  the probe and hands back (:meth:`~tocsin.abc.DispatchStore.unclaim`) what it had queued:
  PENDING again, no attempt spent.
* **Age.** A row queued longer than half the lease is handed back rather than sent, so a lease
  never ends under a row that is still waiting here.

Without threads (``threaded=False``: the in-process
:class:`~tocsin.dispatcher.local.LocalDispatcher` and tests on a manual clock) each submit sends
at once in the caller's thread, destination by destination, with the same breaker.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import os
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

from tocsin.abc import ChannelHold, ClaimedRow
from tocsin.dispatcher.breaker import Breaker, BreakerPolicy, BreakerState
from tocsin.dispatcher.channel_cache import SPEC_TTL_MS
from tocsin.dispatcher.deliver import Tally, envelope_of, send, verdicts
from tocsin.domain import Ack, ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import StoreError

if TYPE_CHECKING:
    from tocsin.dispatcher.core import DispatchCore

__all__ = ["AHEAD_CHUNKS", "BUSY", "CLAIM_ROWS", "LINGER_MS", "OPEN", "PULL_CHUNKS", "LaneInfo",
           "LaneSettings", "Lanes", "holder"]

log = logging.getLogger("tocsin.dispatcher.lanes")

BUSY = "busy"
"""A hold's reason: a lane of the destination is full."""
OPEN = "open"
"""A hold's reason: the destination's breaker is open."""


def holder() -> str:
    """This process, as the holder of its lanes' busy holds: four tasks' processes may each hold
    a burst's destination, and one whose lane emptied ends only its own hold (one shared row was
    ended by the first to empty, and the burst was never held for long). Asked each time, not
    kept at import: the worker daemon imports this module once and forks every worker, and a
    name kept then was the daemon's, the same in every worker."""
    return f"{socket.gethostname()}:{os.getpid()}"


BACKLOG_NICE = 10
"""How much lower (a nice value) the threads of a lane with a backlog run, so the work of
destinations that are on time (a window's claims, a trickle's lane and its writes, in the same
processes) gets the CPU and Python's lock first while a burst keeps every core busy; the burst
still has every idle cycle. Beside a 100 000-row burst, in two back-to-back pairs of runs, the
victim's p90 was 24 and 30 ms with it, 35 and 49 without, and the burst drained at 23 463 and
18 002 rows/s with it, 19 077 and 14 633 without (the p99s, 108/136 against 138/115, were within
the machine's noise)."""
HOLD_MS = 10_000
"""A busy hold lasts this long unless renewed (a process that stops leaves it to expire)."""
SEND_GRACE_S = 2.0
"""How long past the send deadline a lane still waits for a channel's answer."""
CLAIM_ROWS = 1_000
"""Most rows one claim takes when a hand-over window follows (the micro-batch's and each of
the window's): a claim holds the store's writer for its length, and a schedule of another
destination due meanwhile waits for it, so a backlog goes out in claims of this size, each
followed by a look at the destinations' holds (:mod:`tocsin.dispatcher.lanes`). A 100 000-row
burst claimed whole by the micro-batch left another tenant's schedules seconds late. A lane
sends chunks of this size and holds its destination at two of them (one sending, one
queued), so a backlog's claims and its sends go on side by side."""
IDLE_S = 60.0
"""A lane's threads with nothing to do for this long end (the next work starts others)."""
PULL_CHUNKS = 4
"""A lane that claims its own rows (its destination has a backlog) keeps at most this many
chunks' rows, queued and not yet acknowledged (or its room, when that is less)."""
LINGER_MS = 100
"""A lane that claims its own rows and caught up waits for its destination's next schedule
when it falls due within this long (:meth:`_Lane.linger`); else its backlog is over."""
PULL_EPOCH_MS = 60_000
"""A lane that claims its own rows takes a new epoch this often."""
AHEAD_CHUNKS = 2
"""A lane sends while fewer than this many chunks' rows wait for their acknowledgement: the
acknowledger writes one while the next is sent, and a burst's lane never runs far ahead of
what the store has recorded."""


def _renice(nice: int) -> bool:
    """Set the calling thread's nice value (Linux: a thread's own); whether it could."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), nice)
    except (OSError, AttributeError):  # raising it again takes a privilege
        return False
    return True


class _Sent(NamedTuple):
    """A chunk sent and judged, waiting for its acknowledgement."""

    rows: list[ClaimedRow]
    by_epoch: dict[int, list[Ack]]
    tally: Tally
    started_ms: int


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneSettings:
    """How big lanes are and when they give up."""

    room_s: float = 0.25
    """Seconds of the lane's own measured sending its queue holds."""
    min_rows: int = 256
    """The smallest room."""
    max_rows: int = 100_000
    """The largest room."""
    chunk_rows: int = 500
    """Most rows handed to the channel in one send."""
    send_deadline_s: float = 30.0
    """The operator's cap on one send."""
    max_wait_ms: int = 60_000
    """A row queued longer than this is handed back unsent (half the lease)."""
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)


@dataclass(frozen=True, kw_only=True, slots=True)
class LaneInfo:
    """One lane as it stands (for logs and tests)."""

    tenant: str
    channel: str
    queued: int
    sending: int
    room: int
    breaker: BreakerState


class _Lane:
    """One destination's queue, thread and breaker."""

    def __init__(self, lanes: Lanes, key: tuple[str, str]) -> None:
        self.lanes = lanes
        self.key = key
        self.breaker = Breaker(lanes.settings.breaker)
        self.queue: deque[tuple[int, ClaimedRow]] = deque()
        self.ids: set[str] = set()
        self.sending = 0
        self.rate = 0.0
        """Rows a second this lane has been sending (a moving average)."""
        self.busy_since: int | None = None
        self.room_lock = threading.Lock()
        self.thread: threading.Thread | None = None
        self.sender: concurrent.futures.ThreadPoolExecutor | None = None
        self.sent: deque[_Sent] = deque()
        """Chunks sent and judged, for the acknowledger."""
        self.acker: threading.Thread | None = None
        self.acked = threading.Condition(lanes.lock)
        """Wakes the acknowledger: a chunk to acknowledge, or :attr:`check_room`."""
        self.check_room = False
        """The task queued rows: the acknowledger looks at the lane's room."""
        self.last_ack_ms = 0
        self.puller: threading.Thread | None = None
        self.pulling = False
        """The destination has a backlog: the lane holds it and claims its next rows itself."""
        self.pulled = threading.Condition(lanes.lock)
        """Wakes the puller: the lane sent a chunk, so it may have room."""
        self.pull_epoch: tuple[int, int] | None = None
        """The epoch the puller claims under, and when it was taken."""

    @property
    def room(self) -> int:
        """How many rows the queue takes before the destination is held: its measured rate
        times ``room_s``, within ``[min_rows, max_rows]``, times its tenant's weight."""
        s = self.lanes.settings
        return max(s.min_rows, min(s.max_rows, int(self.rate * s.room_s))) * self.lanes.weight(
            self.key[0])

    # -- the caller's side -----------------------------------------------------------------

    def offer(self, rows: Sequence[ClaimedRow], now_ms: int) -> list[ClaimedRow]:
        """Queue ``rows`` (a replay's rows already here are skipped); those to hand back at
        once (the breaker is open) are returned. Called with the lanes' lock held."""
        if self.breaker.state is BreakerState.OPEN and not self.breaker.due_probe(now_ms):
            return list(rows)
        for row in rows:
            if row.id not in self.ids:
                self.ids.add(row.id)
                self.queue.append((now_ms, row))
        return []

    # -- the lane's side -------------------------------------------------------------------

    def take(self, now_ms: int) -> tuple[list[ClaimedRow], list[ClaimedRow]]:
        """The next chunk to send, and the rows too old to send (handed back). With the lanes'
        lock held."""
        stale: list[ClaimedRow] = []
        limit = self.lanes.settings.max_wait_ms
        while self.queue and now_ms - self.queue[0][0] > limit:
            stale.append(self.queue.popleft()[1])
        chunk_rows = self.lanes.settings.chunk_rows
        if self.breaker.state is BreakerState.OPEN or (
                self.lanes.threaded and self.sending >= AHEAD_CHUNKS * chunk_rows):
            return [], stale
        n = 1 if self.breaker.state is BreakerState.PROBING else chunk_rows
        chunk = [self.queue.popleft()[1] for _ in range(min(n, len(self.queue)))]
        self.sending += len(chunk)
        return chunk, stale

    def deliver(self, rows: list[ClaimedRow], *, guarded: bool) -> Tally:
        """Send one chunk, judge it, feed the breaker, and acknowledge it."""
        return self.acknowledge([self.send(rows, guarded=guarded)])

    def send(self, rows: list[ClaimedRow], *, guarded: bool) -> _Sent:
        """Send one chunk, judge each answer and feed the breaker: the verdicts, to
        acknowledge."""
        core = self.lanes.core
        tenant, name = self.key
        spec = core.channels.spec(name, tenant=tenant)
        envelopes = [envelope_of(r) for r in rows]
        started = core.clock.now_ms()
        results = (self._guarded_send(spec, name, envelopes) if guarded
                   else send(core.channels, spec, name, envelopes))
        ended = core.clock.now_ms()
        by_epoch, tally = verdicts(rows, envelopes, results, spec=spec, retry=core.options.retry,
                                   started_ms=started, ended_ms=ended, rng=core.rng)
        opened = False
        for result in results:
            opened = self.breaker.record(result.outcome, result.error, now_ms=ended) or opened
        if opened:
            self._opened(ended)
        return _Sent(rows, by_epoch, tally, started)

    def acknowledge(self, sent: Sequence[_Sent]) -> Tally:
        """Acknowledge chunks' verdicts, in one write per epoch; their tally."""
        core, tally = self.lanes.core, Tally()
        by_epoch: dict[int, list[Ack]] = {}
        for chunk in sent:
            tally.add(chunk.tally)
            for epoch, acks in chunk.by_epoch.items():
                by_epoch.setdefault(epoch, []).extend(acks)
        tally.add(core.acknowledge(by_epoch))
        # the lane's pace is what it gets acknowledged: measured over the send alone, a fast
        # file channel's room outgrew what the store could take, and a burst filled the
        # claims for seconds before its destination was held
        now = core.clock.now_ms()
        cycle = now - max(self.last_ack_ms, min(c.started_ms for c in sent))
        self.last_ack_ms = now
        if cycle > 0:
            sample = sum(len(c.rows) for c in sent) * 1000 / cycle
            self.rate = sample if self.rate == 0 else 0.7 * self.rate + 0.3 * sample
        return tally

    def _guarded_send(self, spec: ChannelSpec | None, name: str,
                      envelopes: list[Envelope]) -> list[Result]:
        """:func:`~tocsin.dispatcher.deliver.send` on the lane's sender thread, waited for
        until the send deadline (and :data:`SEND_GRACE_S`) at most."""
        core = self.lanes.core
        if self.sender is None:
            self.sender = concurrent.futures.ThreadPoolExecutor(
                1, thread_name_prefix=f"tocsin-send-{name}")
        future = self.sender.submit(send, core.channels, spec, name, envelopes)
        try:
            return future.result(timeout=self.lanes.settings.send_deadline_s + SEND_GRACE_S)
        except concurrent.futures.TimeoutError:
            stuck, self.sender = self.sender, None
            stuck.shutdown(wait=False)
            channel = core.channels.discard(*self.key)
            if channel is not None:  # closed when its send returns, if ever
                threading.Thread(target=channel.close, daemon=True).start()
            log.warning("lane %s/%s: a send passed its deadline; channel rebuilt", *self.key)
            return [Result(e.delivery_id, Outcome.RETRY, "no answer within the send deadline")
                    for e in envelopes]

    def _opened(self, now_ms: int) -> None:
        """The breaker opened: hold the destination until the probe, hand back the queue."""
        core, (tenant, name), b = self.lanes.core, self.key, self.breaker
        log.warning("lane %s/%s: breaker open for %d ms after %d failures: %s", tenant, name,
                    b.until_ms - now_ms, b.failures, b.last_error)
        try:
            core.store.hold_channel(ChannelHold(tenant, name, OPEN, b.since_ms, b.until_ms,
                                                b.failures, b.last_error))
        except StoreError as exc:  # the lane still hands back what comes until the probe
            log.warning("lane %s/%s: could not record the open breaker: %s", tenant, name, exc)
        with self.lanes.lock:
            queued = [row for _, row in self.queue]
            self.queue.clear()
        self.lanes.hand_back(self, queued)

    def probe_due(self, now_ms: int) -> None:
        """An open breaker whose time is up lets claims take the destination again."""
        if self.breaker.due_probe(now_ms):
            try:
                self.lanes.core.store.unhold_channel(*self.key, reason=OPEN)
            except StoreError as exc:  # the driver expires the hold anyway
                log.warning("lane %s/%s: could not end the hold: %s", *self.key, exc)

    def mind_room(self, now_ms: int) -> None:
        """Hold the destination while the lane is full (queued and being sent: a lane takes
        its whole queue into one send at once, so the queue alone is mostly empty); end the
        hold when it is half empty."""
        store, (tenant, name) = self.lanes.core.store, self.key
        room = self.room
        # one decision at a time (the task's thread and the lane's both call this): a hold
        # written after the lane had emptied would otherwise stand with nothing to end it
        with self.room_lock:
            queued = len(self.queue) + self.sending
            try:
                if (queued >= room or self.pulling) and (
                        self.busy_since is None or now_ms - self.busy_since > HOLD_MS // 2):
                    store.hold_channel(ChannelHold(tenant, name, BUSY, now_ms,
                                                   now_ms + HOLD_MS, 0, None, holder()))
                    self.busy_since = now_ms
                elif self.busy_since is not None and not self.pulling and queued <= room // 2:
                    store.unhold_channel(tenant, name, reason=BUSY, holder=holder())
                    self.busy_since = None
            except StoreError as exc:  # an optimisation: the queue's age bound holds anyway
                log.warning("lane %s/%s: could not update its hold: %s", tenant, name, exc)

    def backlog_priority(self, lowered: bool, *, done: bool) -> bool | None:
        """Keep the calling lane thread's priority to the lane's state: lowered by
        :data:`BACKLOG_NICE` while the lane pulls a backlog, normal again after. The new
        state; None when the thread should end: it may not raise its priority again (that
        takes a privilege) and has nothing left to do (``done``), so the next work starts a
        thread at the normal priority."""
        if self.pulling and not lowered:
            return _renice(BACKLOG_NICE) or lowered
        if lowered and not self.pulling:
            if _renice(0):
                return False
            return None if done else True
        return lowered

    def run(self) -> None:
        """The lane's thread: send what comes, and hand the verdicts to the acknowledger,
        until idle for :data:`IDLE_S`."""
        lanes, clock = self.lanes, self.lanes.core.clock
        idle_since, lowered = time.monotonic(), False
        while not lanes.stopping:
            with lanes.lock:
                state = self.backlog_priority(lowered, done=not self.queue)
                if state is None:
                    self.thread = None
                    return
            lowered = state
            now = clock.now_ms()
            self.probe_due(now)
            if self.busy_since is not None and not self.queue and not self.sending:
                self.mind_room(now)  # emptied since the hold was written: end it
            with lanes.lock:
                chunk, stale = self.take(now)
                if not chunk and not stale:
                    if time.monotonic() - idle_since > IDLE_S and not self.queue:
                        self.thread = None
                        return
                    wait = 0.1 if self.breaker.state is not BreakerState.OPEN else max(
                        0.001, min((self.breaker.until_ms - now) / 1000, 0.1))
                    lanes.wake[self.key].wait(wait)
                    continue
            idle_since = time.monotonic()
            lanes.hand_back(self, stale)
            if not chunk:
                continue
            try:
                sent = self.send(chunk, guarded=True)
            except Exception:  # the rows stay CLAIMED: the lease sends them again
                log.exception("lane %s/%s: a chunk failed", *self.key)
                self._done(chunk, Tally())
                continue
            with lanes.lock:
                self.sent.append(sent)
                self.acked.notify()

    def acknowledging(self) -> None:
        """The acknowledger's thread: write the verdicts of what was sent, those that have
        gathered together, and mind the lane's room; until idle for :data:`IDLE_S` (or the
        lanes stop and nothing is left to acknowledge)."""
        lanes, clock = self.lanes, self.lanes.core.clock
        limit = max(self.lanes.settings.chunk_rows, 1)
        idle_since, lowered = time.monotonic(), False
        while True:
            with lanes.lock:
                state = self.backlog_priority(lowered, done=not self.sent)
                if state is None:
                    self.acker = None
                    return
                lowered = state
                while not self.sent and not self.check_room:
                    if lanes.stopping or time.monotonic() - idle_since > IDLE_S:
                        self.acker = None
                        return
                    self.acked.wait(0.1)
                batch: list[_Sent] = []
                n = 0
                while self.sent and (not batch or n + len(self.sent[0].rows) <= limit):
                    batch.append(self.sent.popleft())
                    n += len(batch[-1].rows)
                self.check_room = False
            if batch:
                idle_since = time.monotonic()
                tally = Tally()
                try:
                    tally = self.acknowledge(batch)
                except Exception:  # left CLAIMED: the lease sends them again
                    log.exception("lane %s/%s: an acknowledgement failed", *self.key)
                self._done([row for chunk in batch for row in chunk.rows], tally)
            self.mind_room(clock.now_ms())

    def pull(self) -> None:
        """The puller's thread, while the destination has a backlog: hold the destination
        (the windows' claims pass it over, so a trickle's schedule is never claimed behind
        a share of the burst), and claim its next rows whenever the lane has room for about
        half a chunk, at most a chunk at a time, under an epoch of the puller's own. When a
        pull finds fewer rows than it asked for it has caught up, and takes each next one at
        its due instant (:meth:`linger`) until none falls due within :data:`LINGER_MS` (the
        backlog is gone: the windows take the destination's rows at their due instants
        again, once the acknowledger has ended the hold). It ends then, when the breaker
        leaves ``closed``, or when the lanes stop."""
        lanes, core, (tenant, name) = self.lanes, self.lanes.core, self.key
        store, clock, chunk_rows = core.store, core.clock, lanes.settings.chunk_rows
        _renice(BACKLOG_NICE)  # the thread ends with the backlog
        try:
            while True:
                self.mind_room(clock.now_ms())  # the hold, first; renewed while it pulls
                target = min(self.room, PULL_CHUNKS * chunk_rows)
                low = target - max(1, min(chunk_rows, target) // 2)
                with lanes.lock:
                    renew_at = time.monotonic() + HOLD_MS / 4000
                    while (not lanes.stopping and self.breaker.state is BreakerState.CLOSED
                           and len(self.queue) + self.sending > low
                           and time.monotonic() < renew_at):
                        self.pulled.wait(0.1)
                    if lanes.stopping or self.breaker.state is not BreakerState.CLOSED:
                        return
                    want = min(chunk_rows, target - len(self.queue) - self.sending)
                if want <= 0:
                    continue  # woken to renew the hold
                rows = store.pull(epoch=self._pull_epoch(), tenant=tenant, channel=name,
                                  now_ms=clock.now_ms(), limit=want)
                with lanes.lock:
                    back = rows if lanes.stopping else self.offer(rows, clock.now_ms())
                    lanes.wake[self.key].notify()
                lanes.hand_back(self, back)
                if len(rows) < want and not self.linger():
                    return
        except StoreError as exc:  # the windows' claims take the destination's rows again
            log.warning("lane %s/%s: could not take its next rows: %s", tenant, name, exc)
        finally:
            with lanes.lock:
                self.pulling = False
                self.puller = None
                self.check_room = True  # the acknowledger ends the hold once half empty
                self.acked.notify()

    def linger(self) -> bool:
        """A pull caught up with what is due: when the destination's next schedule falls due
        within :data:`LINGER_MS`, wait for its instant and say to pull on (the burst goes on:
        the lane keeps its destination and takes each schedule as it falls due); else the
        backlog is gone. A puller that ended at every catch-up left its destination to the
        windows, which passed it over until its hold ended, and then to a relay out of its
        zone or the next batch: in a burst of 20 000 a second a new puller started every
        30 ms, and one to three times a burst no schedule was claimed for a second."""
        lanes, core, (tenant, name) = self.lanes, self.lanes.core, self.key
        due = core.store.next_pull_ms(tenant=tenant, channel=name,
                                      until_ms=core.clock.now_ms() + LINGER_MS)
        if due is None:
            return False
        with lanes.lock:
            while not lanes.stopping and (left := due - core.clock.now_ms()) > 0:
                self.pulled.wait(left / 1000)
            return not lanes.stopping

    def _pull_epoch(self) -> int:
        """The puller's epoch, a new one every :data:`PULL_EPOCH_MS` (a dead run's release
        finds its claims through it; claim markers of a day's age are forgotten)."""
        core = self.lanes.core
        now = core.clock.now_ms()
        if self.pull_epoch is None or now - self.pull_epoch[1] > PULL_EPOCH_MS:
            self.pull_epoch = (core.store.next_epoch(run=core.options.run, now_ms=now), now)
        return self.pull_epoch[0]

    def _done(self, rows: list[ClaimedRow], tally: Tally) -> None:
        """``rows`` are no longer the lane's (acknowledged, or left to the lease)."""
        with self.lanes.lock:
            self.sending -= len(rows)
            self.ids.difference_update(r.id for r in rows)
            self.lanes.wake[self.key].notify()
            self.pulled.notify()
        self.lanes.finished(tally)


class Lanes:
    """The lanes of one dispatcher process (of one :class:`DispatchCore`)."""

    def __init__(self, core: DispatchCore, *, settings: LaneSettings,
                 threaded: bool = False) -> None:
        self.core = core
        self.settings = settings
        self.threaded = threaded
        self.lock = threading.Lock()
        self.stopping = False
        self._lanes: dict[tuple[str, str], _Lane] = {}
        self.wake: dict[tuple[str, str], threading.Condition] = {}
        self._done = Tally()
        self._changed = threading.Condition(self.lock)
        self._weights: dict[str, tuple[int, int]] = {}

    def weight(self, tenant: str) -> int:
        """``tenant``'s weight (:attr:`~tocsin.domain.Tenant.weight`), read at most every
        :data:`~tocsin.dispatcher.channel_cache.SPEC_TTL_MS`."""
        now = self.core.clock.now_ms()
        cached = self._weights.get(tenant)
        if cached is not None and now - cached[0] < SPEC_TTL_MS:
            return cached[1]
        try:
            weight = self.core.store.get_tenant(tenant).weight
        except StoreError:
            weight = cached[1] if cached else 1
        self._weights[tenant] = (now, weight)
        return weight

    def _lane(self, key: tuple[str, str]) -> _Lane:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane(self, key)
            self.wake[key] = threading.Condition(self.lock)
        return lane

    def submit(self, rows: Sequence[ClaimedRow]) -> Tally:
        """Hand claimed rows to their destinations' lanes. Without threads, they are sent now
        and the tally is theirs; with threads, the tally is what finished since the last call."""
        by_key: dict[tuple[str, str], list[ClaimedRow]] = {}
        for row in rows:
            by_key.setdefault((row.tenant, row.channel), []).append(row)
        if not self.threaded:
            return self._inline(by_key)
        now = self.core.clock.now_ms()
        for key, group in by_key.items():
            with self.lock:
                lane = self._lane(key)
                back = lane.offer(group, now)
                if lane.thread is None:
                    lane.thread = threading.Thread(target=lane.run, daemon=True,
                                                   name=f"tocsin-lane-{key[0]}-{key[1]}")
                    lane.thread.start()
                if lane.acker is None:
                    lane.acker = threading.Thread(target=lane.acknowledging, daemon=True,
                                                  name=f"tocsin-ack-{key[0]}-{key[1]}")
                    lane.acker.start()
                lane.check_room = True
                lane.acked.notify()
                self.wake[key].notify()
                if (not lane.pulling and lane.breaker.state is BreakerState.CLOSED
                        and len(lane.queue) + lane.sending >= self.settings.min_rows):
                    lane.pulling = True  # a backlog: the lane takes its next rows itself
                    lane.puller = threading.Thread(target=lane.pull, daemon=True,
                                                   name=f"tocsin-pull-{key[0]}-{key[1]}")
                    lane.puller.start()
            self.hand_back(lane, back)
        return self.collect()

    def _inline(self, by_key: dict[tuple[str, str], list[ClaimedRow]]) -> Tally:
        tally = Tally()
        for key, group in by_key.items():
            lane = self._lane(key)
            now = self.core.clock.now_ms()
            lane.probe_due(now)
            back = lane.offer(group, now)
            while lane.queue:
                chunk, _ = lane.take(self.core.clock.now_ms())
                if not chunk:
                    break
                try:
                    tally.add(lane.deliver(chunk, guarded=False))
                finally:
                    lane.sending -= len(chunk)
                    lane.ids.difference_update(r.id for r in chunk)
            back += [row for _, row in lane.queue]
            lane.queue.clear()
            lane.ids.clear()
            self.hand_back(lane, back)
        return tally

    def hand_back(self, lane: _Lane, rows: Sequence[ClaimedRow]) -> None:
        """Release rows unsent (PENDING again, no attempt spent), by their epochs."""
        if not rows:
            return
        by_epoch: dict[int, list[str]] = {}
        for row in rows:
            by_epoch.setdefault(row.epoch, []).append(row.id)
        with self.lock:
            lane.ids.difference_update(r.id for r in rows)
        for epoch, ids in by_epoch.items():
            try:
                self.core.store.unclaim(epoch=epoch, ids=ids)
            except StoreError as exc:  # left CLAIMED: the lease sends them in time
                log.warning("lane %s/%s: could not hand back %d rows: %s", *lane.key,
                            len(ids), exc)

    def finished(self, tally: Tally) -> None:
        """A lane finished a chunk: add its tally and wake whoever waits for one."""
        with self.lock:
            self._done.add(tally)
            self._changed.notify_all()

    def collect(self) -> Tally:
        """What the lanes finished since the last call."""
        with self.lock:
            done, self._done = self._done, Tally()
        return done

    def wait(self, timeout_s: float) -> None:
        """Until a lane finishes a chunk, or ``timeout_s``."""
        with self.lock:
            self._changed.wait(timeout_s)

    def queued(self) -> int:
        """How many rows wait in the queues of lanes that do not claim their own rows, not
        yet handed to their channels (what a window's claims put there)."""
        with self.lock:
            return sum(len(lane.queue) for lane in self._lanes.values() if not lane.pulling)

    def busy(self) -> bool:
        """Whether any lane has rows queued or being sent."""
        with self.lock:
            return any(lane.queue or lane.sending for lane in self._lanes.values())

    def drain(self, timeout_s: float) -> bool:
        """Wait until no lane has anything queued or being sent (True), or ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while self.busy():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.wait(min(left, 0.05))
        return True

    def info(self) -> list[LaneInfo]:
        """Every lane as it stands."""
        with self.lock:
            lanes = sorted(self._lanes.items())
            counts = [(len(lane.queue), lane.sending) for _, lane in lanes]
        # the room reads the tenant's weight, from the store at times: not under the lock
        return [LaneInfo(tenant=k[0], channel=k[1], queued=queued, sending=sending,
                         room=lane.room, breaker=lane.breaker.state)
                for (k, lane), (queued, sending) in zip(lanes, counts, strict=True)]

    def close(self) -> None:
        """Stop the lane threads, hand back what they had queued, and end this process's busy
        holds (what is being sent stays CLAIMED: the lease sends it again if it never ends)."""
        with self.lock:
            self.stopping = True
            for cond in self.wake.values():
                cond.notify_all()
            for lane in self._lanes.values():
                lane.pulled.notify_all()
            held = [lane.key for lane in self._lanes.values() if lane.busy_since is not None]
            queued = {lane.key: [row for _, row in lane.queue] for lane in self._lanes.values()}
            for lane in self._lanes.values():
                lane.queue.clear()
        for key, rows in queued.items():
            self.hand_back(self._lanes[key], rows)
        for tenant, name in held:
            with contextlib.suppress(StoreError):  # it expires anyway
                self.core.store.unhold_channel(tenant, name, reason=BUSY, holder=holder())

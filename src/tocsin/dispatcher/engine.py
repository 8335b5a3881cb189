"""The delivery engine: every destination of one dispatcher process, on a fixed set of threads.

A task (a micro-batch's, a hand-over window's, the relay's) claims rows and hands them to
:meth:`Engine.submit`, which only posts them to the engine's inbox and returns. One loop owns
every destination's state (:class:`~tocsin.dispatcher.destination.Destination`, a dict entry,
forgotten when idle) and makes every decision (:func:`~tocsin.dispatcher.destination.plan`);
its workers do the waiting, and answer with messages on the same inbox::

    submit ─▶ inbox ─▶ loop: offer · plan ─┬─ chunk ─▶ send pool ──(Sent)──────────▶ inbox
                  ▲                        ├─ verdicts, holds, hand-backs ─▶ writer ─(Written)─┤
                  │                        └─ want n rows ─▶ puller ─────(Pulled)─────────────┤
                  └───────────────────────────────────────────────────────────────────────────┘

Rows stay CLAIMED under the epoch that claimed them until the writer records their verdicts (a
replay's rows already here are skipped; a crash leaves them to the lease or a dead run's
release, and they go out again under the same delivery id). What the loop decides per
destination — room and busy holds, an open breaker's hold and probe, rows too old to send,
sends past their deadline, a backlog's pulls and lingering — is in
:mod:`tocsin.dispatcher.destination`; the knobs are in :mod:`tocsin.dispatcher.knobs`. Who runs
the loop and the jobs is :mod:`tocsin.dispatcher.workers`: the engine's own threads in a
dispatcher process, the caller's thread in the deterministic harness — the same code.

:meth:`Engine.close` is an ordered stop: no new rows (rows submitted after it are handed back
at once), the queues handed back, the pulls and this process's holds ended, the sends in
flight answered (or passed their deadline), every write done, the threads joined; the caller
closes the channels after.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import heapq
import logging
import os
import queue
import socket
import threading
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, NamedTuple

from tocsin.abc import Channel, ChannelHold, ClaimedRow
from tocsin.dispatcher.breaker import Breaker, BreakerState
from tocsin.dispatcher.channel_cache import ChannelBuildTimeout
from tocsin.dispatcher.deliver import Tally, envelope_of, send, send_async, verdicts
from tocsin.dispatcher.destination import (
    Destination,
    EngineSettings,
    acknowledged,
    idle,
    is_backlog,
    offer,
    plan,
    pulled,
    room,
    sent,
)
from tocsin.dispatcher.knobs import (
    ACK_ROWS,
    ADOPT_KEYS,
    ADOPT_LAG_MS,
    ADOPT_MS,
    ADOPT_QUIET_MS,
    CHANNEL_IDLE_MS,
    CHANNEL_SWEEP_MS,
    LINGER_MS,
    LOOP_TICK_MS,
    PULL_EPOCH_MS,
    WEIGHT_TTL_MS,
)
from tocsin.dispatcher.terms import split_expired
from tocsin.dispatcher.workers import Workers
from tocsin.domain import Ack, ChannelSpec, Envelope, HoldReason, Outcome, Result
from tocsin.errors import StoreError

if TYPE_CHECKING:
    from tocsin.clock import Clock
    from tocsin.dispatcher.core import DispatchCore

__all__ = ["DestinationInfo", "Engine", "holder"]

log = logging.getLogger("tocsin.dispatcher.engine")
Key = tuple[str, str]


def holder() -> str:
    """This process, as the holder of its busy holds (each process ends only its own). Asked
    each time, not kept at import: the worker daemon forks every worker from one process."""
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True, kw_only=True, slots=True)
class DestinationInfo:
    """One destination as it stands (for logs and tests)."""

    tenant: str
    channel: str
    queued: int
    sending: int
    room: int
    breaker: BreakerState
    pulling: bool


class _Submit(NamedTuple):
    rows: Sequence[ClaimedRow]


class _Sent(NamedTuple):
    key: Key
    flight: int
    rows: list[ClaimedRow]
    by_epoch: dict[int, list[Ack]] | None
    """None: the send failed before any answer (the rows are handed back)."""
    tally: Tally
    outcomes: list[tuple[Outcome, str | None]]
    started_ms: int


class _Written(NamedTuple):
    acked: list[tuple[Key, list[str], int]]
    handed_back: int
    tally: Tally


class _Pulled(NamedTuple):
    key: Key
    rows: list[ClaimedRow]
    want: int
    next_due: int | None
    adopted: bool = False
    """Pulled for a backlog another process holds: rows make it this process's too."""


class _Stop(NamedTuple):
    pass


_Message = _Submit | _Sent | _Written | _Pulled | _Stop


class _Unhold(NamedTuple):
    key: Key
    reason: HoldReason


_Op = ChannelHold | _Unhold | list[ClaimedRow]
"""The writer's other work, in order: a hold, the end of one, rows to hand back."""


class _AckJob(NamedTuple):
    key: Key
    by_epoch: dict[int, list[Ack]]
    ids: list[str]
    started_ms: int
    tally: Tally
    backlog: bool


class Engine:
    """The delivery engine of one :class:`~tocsin.dispatcher.core.DispatchCore`."""

    def __init__(self, core: DispatchCore, *, settings: EngineSettings,
                 workers: Workers) -> None:
        self.core = core
        self.clock: Clock = core.clock
        self.settings = settings
        self.workers = workers
        self.holder = holder()
        """This process, as the holder of the engine's busy holds (made in the process that
        runs the engine: a worker, forked from the daemon)."""
        self._inbox: queue.SimpleQueue[_Message] = queue.SimpleQueue()
        # the loop's own state (only the loop thread touches it)
        self._dests: dict[Key, Destination] = {}
        self._timers: list[tuple[int, Key]] = []
        self._wakes: dict[Key, int] = {}
        self._dirty: set[Key] = set()
        self._outgoing: dict[bool, list[tuple[Key, int, list[ClaimedRow]]]] = {False: [],
                                                                                True: []}
        """The chunks this step decided to send, by whether their destination pulls a backlog:
        each list goes to its pool as one job at the step's end."""
        self._queued_by: dict[Key, int] = {}
        """Each destination's queued rows as :attr:`_queued` counts them (not pulling)."""
        self._queued_sum = 0
        self._abandoned: dict[tuple[Key, int], Channel | None] = {}
        self._sending: set[asyncio.Task[list[Result]]] = set()
        """Sends started on the channel loop (held here: the loop keeps only weak references
        to its tasks)."""
        self._weights: dict[str, tuple[int, int]] = {}
        self._stopping = False
        self._swept_ms: int | None = None
        self.finished = False
        """The loop has stopped: everything handed back or written."""
        # shared with the callers' threads, under the lock
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._done = Tally()
        self._held = 0
        """Rows given to the engine and not yet finished (written, or handed back)."""
        self._pending = 0
        """Rows submitted that the loop has not queued yet."""
        self._queued = 0
        """Rows queued by destinations that do not pull (published by the loop)."""
        self._closing = False
        # the writer's and the puller's queues
        self._wlock = threading.Lock()
        self._acks: deque[_AckJob] = deque()
        self._ops: deque[_Op] = deque()
        self._plock = threading.Lock()
        self._pulls: dict[bool, deque[tuple[Key, int, bool]]] = {False: deque(), True: deque()}
        """Pulls to make, by whether the destination is behind (the niced puller takes
        those): the key, how many rows, and whether it is an adoption."""
        self._pull_epoch: tuple[int, int] | None = None
        self._adopted_ms: int | None = None
        self._others_busy = False
        """Whether the last look for other processes' backlogs found a busy destination."""
        self._started = False
        self._start_lock = threading.Lock()

    def start(self) -> None:
        """Start the workers (once): at the first row, window or message. A process that only
        plans batches or records them (Spark's driver-side source and sink runners make a
        core too) never starts them, so it runs no engine threads and pulls no backlog."""
        if self._started:
            return
        with self._start_lock:
            if not self._started and not self._closing:
                self.workers.start(self)
                self._started = True

    # -- the callers' side -------------------------------------------------------------------

    def submit(self, rows: Sequence[ClaimedRow]) -> Tally:
        """Hand claimed rows to their destinations; the tally of what finished since the last
        call. After :meth:`close`, the rows are handed back at once (PENDING again)."""
        with self._lock:
            closing = self._closing
            if not closing and rows:
                self._held += len(rows)
                self._pending += len(rows)
        if closing:
            self.core.unclaim(rows)
        elif rows:
            self._post(_Submit(rows))
        else:
            self.start()
            self.workers.kick()
        return self.collect()

    def collect(self) -> Tally:
        """What finished since the last call."""
        with self._lock:
            done, self._done = self._done, Tally()
        return done

    def wait(self, timeout_s: float) -> None:
        """Until a chunk finishes, or ``timeout_s``."""
        with self._lock:
            self._changed.wait(timeout_s)

    def queued(self) -> int:
        """Rows waiting to be sent by destinations that do not pull their own (what the
        windows' claims put there)."""
        with self._lock:
            return self._pending + self._queued

    def busy(self) -> bool:
        """Whether the engine holds any row not yet finished."""
        with self._lock:
            return self._held > 0

    def drain(self, timeout_s: float) -> bool:
        """Wait until the engine holds no row (True), or ``timeout_s`` (a bound on waiting,
        in real seconds: a manual clock does not move while the workers answer)."""
        deadline = time.monotonic() + timeout_s
        self.workers.kick()
        while self.busy():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.wait(min(left, 0.05))
        return True

    def info(self) -> list[DestinationInfo]:
        """Every destination the engine has (a snapshot, read without the loop's help)."""
        for _ in range(10):
            try:
                items = sorted(self._dests.items())
                break
            except RuntimeError:  # the loop changed the dict meanwhile
                continue
        else:
            return []
        return [DestinationInfo(tenant=k[0], channel=k[1], queued=len(d.queue),
                                sending=d.sending, room=room(d, self.settings),
                                breaker=d.breaker.state, pulling=d.pulling) for k, d in items]

    def close(self) -> None:
        """The ordered stop (see the module): returns when the engine's threads are joined."""
        with self._lock:
            if self._closing:
                return
            self._closing = True
        with self._start_lock:
            if not self._started:  # never started: nothing to stop
                self.finished = True
                return
        self._post(_Stop())
        self.workers.stop()

    # -- the loop ----------------------------------------------------------------------------

    def _post(self, message: _Message) -> None:
        self.start()
        self._inbox.put(message)
        self.workers.kick()

    def run(self) -> None:
        """The loop's thread: wait for a message or the next timer, then :meth:`step`."""
        while not self.finished:
            now = self.clock.now_ms()
            wait = LOOP_TICK_MS
            if self._timers:
                wait = max(0, min(wait, self._timers[0][0] - now))
            try:
                first: _Message | None = self._inbox.get(timeout=wait / 1000)
            except queue.Empty:
                first = None
            try:
                self.step(first)
            except Exception:  # never let one bad decision stop every destination
                log.exception("delivery engine: a step failed")

    def step(self, first: _Message | None = None) -> None:
        """Apply every message waiting, then decide for each destination that changed or
        whose timer is due. The only place state changes."""
        now = self.clock.now_ms()
        if first is not None:
            self._apply(first, now)
        while True:
            try:
                message = self._inbox.get_nowait()
            except queue.Empty:
                break
            self._apply(message, now)
        while self._timers and self._timers[0][0] <= now:
            at, key = heapq.heappop(self._timers)
            if self._wakes.get(key) == at:
                del self._wakes[key]
            self._dirty.add(key)
        dirty, self._dirty = self._dirty, set()
        for key in dirty:
            self._decide(key, now)
        for backlog, chunks in self._outgoing.items():
            if chunks:
                self._outgoing[backlog] = []
                self.workers.send(_SendJob(self, chunks, backlog), backlog=backlog)
        for key in dirty:  # only a changed destination's queue changed: O(changed), not O(all)
            d = self._dests.get(key)
            n = len(d.queue) if d is not None and not d.pulling else 0
            self._queued_sum += n - (self._queued_by.pop(key, 0))
            if n:
                self._queued_by[key] = n
        if self._swept_ms is None:
            self._swept_ms = now
        elif now - self._swept_ms >= CHANNEL_SWEEP_MS and not self._stopping:
            self._swept_ms = now
            self.workers.send(self._close_idle_channels, backlog=True)
        queued = self._queued_sum
        out = self._stopping and any(d.flights or d.pull_out for d in self._dests.values())
        with self._lock:
            self._queued = queued
            if self._stopping and self._held == 0 and not out:
                self.finished = True
            self._changed.notify_all()

    def _apply(self, message: _Message, now: int) -> None:
        if isinstance(message, _Submit):
            with self._lock:
                self._pending -= len(message.rows)
            by_key: dict[Key, list[ClaimedRow]] = {}
            for row in message.rows:
                by_key.setdefault((row.tenant, row.channel), []).append(row)
            for key, rows in by_key.items():
                self._offer(key, rows, now)
        elif isinstance(message, _Sent):
            self._answered(message, now)
        elif isinstance(message, _Written):
            for key, ids, started in message.acked:
                d = self._dests.get(key)
                if d is not None:
                    acknowledged(d, ids, started, now)
                    self._dirty.add(key)
            n = sum(len(ids) for _, ids, _ in message.acked) + message.handed_back
            with self._lock:
                self._held -= n
                self._done.add(message.tally)
        elif isinstance(message, _Pulled):
            d = self._dests.get(message.key)
            if d is None and message.adopted and message.rows and not self._stopping:
                d = self._dests[message.key] = Destination(message.key,
                                                           Breaker(self.settings.breaker))
                d.pulling = True  # its backlog is this process's too now
            if d is None or self._stopping:
                back = message.rows
                if d is not None:
                    d.pull_out = False
            else:
                before = len(d.ids)
                back = pulled(d, message.rows, message.want, message.next_due, now)
                self._release(len(message.rows) - len(back) - (len(d.ids) - before))
            self._hand_back(message.key, back)
            self._dirty.add(message.key)
        else:
            self._stopping = True
            self._dirty.update(self._dests)

    def _offer(self, key: Key, rows: list[ClaimedRow], now: int) -> None:
        d = self._dests.get(key)
        if d is None:
            d = self._dests[key] = Destination(key, Breaker(self.settings.breaker))
        if self._stopping:
            back = rows
        else:
            before = len(d.ids)
            back = offer(d, rows, now)
            self._release(len(rows) - len(back) - (len(d.ids) - before))  # a replay's repeats
        self._hand_back(key, back)
        self._dirty.add(key)

    def _release(self, n: int) -> None:
        if n:
            with self._lock:
                self._held -= n

    def _decide(self, key: Key, now: int) -> None:
        d = self._dests.get(key)
        if d is None:
            return
        d.weight = self._weight(key[0], now)
        p = plan(d, now, self.settings, holder=self.holder, stopping=self._stopping)
        for reason in p.unhold:
            self._write(_Unhold(key, reason))
        if p.hold is not None:
            self._write(p.hold)
        self._hand_back(key, p.stale)
        for flight in p.overdue:
            self._overdue(d, flight, now)
        behind = is_backlog(d)
        self._outgoing[behind].extend((key, flight, chunk) for flight, chunk in p.chunks)
        if p.pull:
            with self._plock:
                self._pulls[behind].append((key, p.pull, False))
            self.workers.pull(backlog=behind)
        wake = now if p.overdue else p.wake_ms
        if wake is not None and wake < self._wakes.get(key, wake + 1):
            self._wakes[key] = wake
            heapq.heappush(self._timers, (wake, key))
        if idle(d) and not any(k == key for k, _ in self._abandoned):
            # (a destination with a send still hanging past its deadline is kept: its flight
            # numbers go on, so that send's late answer is never taken for a new one's)
            del self._dests[key]

    def _answered(self, m: _Sent, now: int) -> None:
        if (m.key, m.flight) in self._abandoned:  # past its deadline: already judged RETRY
            channel = self._abandoned.pop((m.key, m.flight))
            if channel is not None:
                self.workers.send(channel.close, backlog=True)
            return
        d = self._dests.get(m.key)
        if d is None:  # cannot happen: a flight keeps its destination
            return
        hold, back = sent(d, m.flight, m.outcomes, now)
        if hold is not None:
            log.warning("destination %s/%s: breaker open for %d ms after %d failures: %s",
                        *m.key, hold.until_ms - now, hold.failures, hold.last_error)
            self._write(hold)
            self._hand_back(m.key, back)
        if m.by_epoch is None:
            d.sending -= len(m.rows)
            d.ids.difference_update(r.id for r in m.rows)
            self._hand_back(m.key, m.rows)
        else:
            with self._wlock:
                self._acks.append(_AckJob(m.key, m.by_epoch, [r.id for r in m.rows],
                                          m.started_ms, m.tally, is_backlog(d)))
            self.workers.write()
        self._dirty.add(m.key)

    def _overdue(self, d: Destination, flight: int, now: int) -> None:
        """A send passed its deadline: answer RETRY for it, and drop the channel (closed when
        its send returns, if ever), so the next send builds a new one."""
        f = d.flights[flight]
        tenant, name = d.key
        channel = self.core.channels.discard(tenant, name)
        log.warning("destination %s/%s: a send passed its deadline; channel rebuilt", *d.key)
        envelopes = [envelope_of(r) for r in f.rows]
        results = [Result(e.delivery_id, Outcome.RETRY, "no answer within the send deadline")
                   for e in envelopes]
        try:
            spec = self.core.channels.spec(name, tenant=tenant)
        except StoreError:
            spec = None
        by_epoch, tally = verdicts(f.rows, envelopes, results, spec=spec,
                                   retry=self.core.options.retry, started_ms=f.started_ms,
                                   ended_ms=now, rng=self.core.rng)
        self._answered(_Sent(d.key, flight, f.rows, by_epoch, tally,
                             [(r.outcome, r.error) for r in results], f.started_ms), now)
        self._abandoned[(d.key, flight)] = channel  # its late answer only closes the channel

    def _hand_back(self, key: Key, rows: Sequence[ClaimedRow]) -> None:
        if rows:
            self._write(list(rows))

    def _write(self, op: _Op) -> None:
        with self._wlock:
            self._ops.append(op)
        self.workers.write()

    def _weight(self, tenant: str, now: int) -> int:
        """``tenant``'s weight, read at most every :data:`WEIGHT_TTL_MS`."""
        cached = self._weights.get(tenant)
        if cached is not None and now - cached[0] < WEIGHT_TTL_MS:
            return cached[1]
        try:
            weight = self.core.tenant_weight(tenant)
        except StoreError:
            weight = cached[1] if cached else 1
        self._weights[tenant] = (now, weight)
        return weight

    # -- the workers' side -------------------------------------------------------------------

    def _close_idle_channels(self) -> None:
        """Close the channels of destinations idle for :data:`CHANNEL_IDLE_MS`."""
        try:
            closed = self.core.channels.close_idle(idle_ms=CHANNEL_IDLE_MS)
        except Exception:  # housekeeping: the next sweep tries again
            log.exception("delivery engine: closing idle channels failed")
            return
        if closed:
            log.info("delivery engine: closed %d idle channels", closed)

    def send_chunks(self, chunks: Sequence[tuple[Key, int, list[ClaimedRow]]], *,
                    backlog: bool) -> None:
        """A send worker's job: the chunks one step of the loop decided (of destinations
        pulling a backlog, or not), each as :meth:`send_chunk`. Those whose channel is built
        and asynchronous start together, with one hand-over to the channel loop; a blocking
        channel's send runs here when it is the only one, else each is a job of its own, so
        one slow client holds no other destination's send. With ten thousand destinations,
        each chunk is often one row of its own destination: a job and a hand-over each had
        them wait for the send threads and the loop in turn (13 ms at the median, 160 ms at
        p99, in a process sending 560 chunks a second)."""
        if not self.workers.detach_async:  # stepped: each send is awaited where it is made
            for key, flight, rows in chunks:
                self.send_chunk(key, flight, rows)
            return
        ready: list[tuple[_Chunk, Channel]] = []
        for key, flight, rows in chunks:
            self.send_chunk(key, flight, rows, ready)
        waiting = [(chunk, channel) for chunk, channel in ready if not channel.is_async]
        if started := [(chunk, channel) for chunk, channel in ready if channel.is_async]:
            from tocsin.channels.shared import shared_loop

            try:
                shared_loop().loop.call_soon_threadsafe(self._start_sends, started)
            except Exception:  # the loop is closing: nothing was sent
                log.exception("delivery engine: %d chunks could not start", len(started))
                for chunk, _ in started:
                    self._unsent(chunk.key, chunk.flight, chunk.rows)
        for chunk, channel in waiting[:-1]:
            self.workers.send(partial(self._send_guarded, chunk, channel), backlog=backlog)
        if waiting:
            self._send_guarded(*waiting[-1])

    def _start_sends(self, ready: list[tuple[_Chunk, Channel]]) -> None:
        """On the channel loop: start each chunk's send; each is judged as it ends."""
        loop = asyncio.get_running_loop()
        for chunk, channel in ready:
            task = loop.create_task(send_async(channel, chunk.key[1], chunk.live))
            self._sending.add(task)
            task.add_done_callback(partial(self._send_ended, chunk))

    def _send_ended(self, chunk: _Chunk, task: asyncio.Task[list[Result]]) -> None:
        self._sending.discard(task)
        self._judged(chunk.key, chunk.flight, chunk.rows, chunk.envelopes, chunk.spec,
                     chunk.started, chunk.expired, _results(task, chunk.key[1], chunk.live))

    def send_chunk(self, key: Key, flight: int, rows: list[ClaimedRow],
                   ready: list[tuple[_Chunk, Channel]] | None = None) -> None:
        """Hand one chunk to the channel and judge each answer (a chunk whose channel is
        built is added to ``ready`` instead, when given, for :meth:`send_chunks` to send).
        No thread waits for a channel's build: one not built yet is awaited on the process's
        channel loop, and the send goes on when it is built (:meth:`_send_on`). A channel
        whose client is asynchronous (webhooks) is awaited on that loop too, so the worker is
        free at once (with :class:`SteppedWorkers` the job waits for both, so a step ends
        with its answer)."""
        core, (tenant, name) = self.core, key
        try:
            spec = core.channels.spec(name, tenant=tenant)
            envelopes = [envelope_of(r) for r in rows]
            started = self.clock.now_ms()
            live, expired = split_expired(rows, envelopes, spec, started)  # never sent
            chunk = _Chunk(key, flight, rows, envelopes, spec, started, live, expired)
            if spec is None or not live:
                self._send_on(chunk, None)
                return
            built = core.channels.built(spec)
            if built is None and core.channels.builds_quickly(spec):
                done: concurrent.futures.Future[Channel] = concurrent.futures.Future()
                try:  # no I/O: built here, on this worker, never on the channel loop
                    done.set_result(core.channels.channel(spec))
                except Exception as exc:
                    done.set_exception(exc)
                self._send_built(chunk, done, ready)
                return
            if built is not None:
                self._send_on(chunk, built, ready)
                return
            from tocsin.channels.shared import shared_loop

            building = asyncio.run_coroutine_threadsafe(core.channels.channel_async(spec),
                                                        shared_loop().loop)
            if self.workers.detach_async:
                building.add_done_callback(lambda f: self.workers.send(
                    partial(self._send_built, chunk, f), backlog=False))
            else:
                concurrent.futures.wait([building])
                self._send_built(chunk, building)
        except Exception:  # nothing was judged: the rows go back PENDING
            log.exception("destination %s/%s: a chunk failed", tenant, name)
            self._unsent(key, flight, rows)

    def _unsent(self, key: Key, flight: int, rows: list[ClaimedRow]) -> None:
        """Tell the loop a chunk was not sent (nothing judged): its rows go back PENDING."""
        self._post(_Sent(key, flight, rows, None, Tally(), [], self.clock.now_ms()))

    def _send_built(self, chunk: _Chunk, building: concurrent.futures.Future[Channel],
                    ready: list[tuple[_Chunk, Channel]] | None = None) -> None:
        """The chunk's channel build ended (or its deadline passed): send on it."""
        try:
            channel: Channel | Exception = building.result()
        except ChannelBuildTimeout as exc:
            # still opening: no attempt was made, so none is spent. The chunk goes back
            # PENDING and the next claim finds the channel built (or its build's error).
            log.info("destination %s/%s: %s; %d rows handed back unsent", *chunk.key, exc,
                     len(chunk.rows))
            self._post(_Sent(chunk.key, chunk.flight, chunk.rows, None, Tally(), [],
                             chunk.started))
            return
        except Exception as exc:  # a build that failed: an attempt each, RETRY
            channel = exc
        self._send_guarded(chunk, channel, ready)

    def _send_guarded(self, chunk: _Chunk, channel: Channel | Exception,
                      ready: list[tuple[_Chunk, Channel]] | None = None) -> None:
        """:meth:`_send_on`; when it fails before any answer, the rows go back PENDING."""
        try:
            self._send_on(chunk, channel, ready)
        except Exception:
            log.exception("destination %s/%s: a chunk failed", *chunk.key)
            self._unsent(chunk.key, chunk.flight, chunk.rows)

    def _send_on(self, chunk: _Chunk, channel: Channel | Exception | None,
                 ready: list[tuple[_Chunk, Channel]] | None = None) -> None:
        """Send the chunk's live rows on ``channel`` (or answer for them: why it could not be
        built, or None: not registered) and judge every answer; a built channel's send is
        added to ``ready`` instead, when given, for :meth:`send_chunks` to make."""
        name = chunk.key[1]
        if ready is not None and isinstance(channel, Channel) and chunk.live:
            ready.append((chunk, channel))
            return
        answered = partial(self._judged, chunk.key, chunk.flight, chunk.rows, chunk.envelopes,
                           chunk.spec, chunk.started, chunk.expired)
        if isinstance(channel, Channel) and channel.is_async:
            from tocsin.channels.shared import shared_loop

            future = asyncio.run_coroutine_threadsafe(
                send_async(channel, name, chunk.live), shared_loop().loop)
            if self.workers.detach_async:
                future.add_done_callback(lambda f: answered(_results(f, name, chunk.live)))
            else:
                answered(_results(future, name, chunk.live))
            return
        answered(send(channel, chunk.spec, name, chunk.live))

    def _judged(self, key: Key, flight: int, rows: list[ClaimedRow],
                envelopes: list[Envelope], spec: ChannelSpec | None, started: int,
                expired: list[Result], results: list[Result]) -> None:
        """Judge a chunk's answers (and its ``expired`` rows, not sent: the breaker does not
        see them) and tell the loop."""
        core = self.core
        try:
            by_epoch, tally = verdicts(rows, envelopes, expired + results, spec=spec,
                                       retry=core.options.retry, started_ms=started,
                                       ended_ms=self.clock.now_ms(), rng=core.rng)
            message = _Sent(key, flight, rows, by_epoch, tally,
                            [(r.outcome, r.error) for r in results], started)
        except Exception:  # nothing was judged: the rows go back PENDING
            log.exception("destination %s/%s: a chunk's answers failed", *key)
            message = _Sent(key, flight, rows, None, Tally(), [], self.clock.now_ms())
        self._post(message)

    def writer_has_work(self) -> bool:
        """Whether the store-writer has anything queued."""
        with self._wlock:
            return bool(self._acks or self._ops)

    def write_round(self) -> bool:
        """The store-writer's round: the verdicts of destinations on time (every one that
        gathered, one transaction per epoch), then holds and hand-backs in order, then up to
        :data:`ACK_ROWS` of the backlogs' verdicts. False when there was nothing to write."""
        with self._wlock:
            urgent = [a for a in self._acks if not a.backlog]
            backlog: list[_AckJob] = []
            n = 0
            for a in self._acks:
                if a.backlog and (not backlog or n + len(a.ids) <= ACK_ROWS):
                    backlog.append(a)
                    n += len(a.ids)
            taken = {id(a) for a in (*urgent, *backlog)}
            self._acks = deque(a for a in self._acks if id(a) not in taken)
            ops, self._ops = self._ops, deque()
        if not (urgent or backlog or ops):
            return False
        tally, handed = Tally(), 0
        self._acknowledge(urgent, tally)
        for op in ops:
            handed += self._apply_op(op)
        self._acknowledge(backlog, tally)
        acked = [(a.key, a.ids, a.started_ms) for a in (*urgent, *backlog)]
        self._post(_Written(acked, handed, tally))
        return True

    def _acknowledge(self, jobs: list[_AckJob], tally: Tally) -> None:
        if not jobs:
            return
        by_epoch: dict[int, list[Ack]] = {}
        for job in jobs:
            tally.add(job.tally)
            for epoch, acks in job.by_epoch.items():
                by_epoch.setdefault(epoch, []).extend(acks)
        try:
            tally.add(self.core.acknowledge(by_epoch))
        except Exception:  # left CLAIMED: the lease sends them again, same delivery ids
            log.exception("delivery engine: an acknowledgement failed")

    def _apply_op(self, op: _Op) -> int:
        """One hold, end of hold or hand-back; how many rows it handed back."""
        try:
            if isinstance(op, ChannelHold):
                self.core.hold(op)
            elif isinstance(op, _Unhold):
                self.core.unhold(*op.key, reason=op.reason,
                                 holder=self.holder if op.reason is HoldReason.BUSY else None)
            else:
                self.core.unclaim(op)
                return len(op)
        except StoreError as exc:  # a hold expires anyway; a hand-back is left to the lease
            log.warning("delivery engine: could not write %r: %s", op, exc)
            return len(op) if isinstance(op, list) else 0
        return 0

    def pull_round(self, *, backlog: bool = True) -> bool:
        """A puller's round: one destination's next rows (False: none was asked), of a
        destination that is behind (``backlog``: the niced puller, which every
        :data:`ADOPT_MS` first asks for a share of the backlogs other processes pull) or of
        one that is on time."""
        if backlog:
            self._adopt_round()
        with self._plock:
            pulls = self._pulls[backlog]
            if not pulls:
                return False
            key, want, adopted = pulls.popleft()
        tenant, name = key
        rows: list[ClaimedRow] = []
        next_due = None
        try:
            now = self.clock.now_ms()
            rows = self.core.pull(epoch=self._puller_epoch(now), tenant=tenant, channel=name,
                                  now_ms=now, limit=want)
            if len(rows) < want:
                next_due = self.core.next_pull_ms(tenant=tenant, channel=name,
                                                  until_ms=self.clock.now_ms() + LINGER_MS)
        except StoreError as exc:  # the windows' claims take the destination's rows again
            log.warning("destination %s/%s: could not take its next rows: %s", *key, exc)
            want = len(rows) + 1  # fewer than asked, none due: the backlog is over
        with self._lock:
            self._held += len(rows)
        self._post(_Pulled(key, rows, want, next_due, adopted))
        return True

    def _adopt_round(self) -> None:
        """Queue a pull for up to :data:`ADOPT_KEYS` destinations that other processes hold
        busy and this one does not have, and that are behind (a row due
        :data:`ADOPT_LAG_MS` ago): what a pull finds becomes this process's backlog too
        (every :data:`ADOPT_MS` while the last look found another process busy, else every
        :data:`ADOPT_QUIET_MS`). A pull that finds nothing writes nothing."""
        now = self.clock.now_ms()
        every = ADOPT_MS if self._others_busy else ADOPT_QUIET_MS
        if self._adopted_ms is not None and now - self._adopted_ms < every:
            return
        self._adopted_ms = now
        with self._lock:
            if self._closing:
                return
        try:
            busy = self.core.busy_elsewhere(self.holder)
            self._others_busy = bool(busy)
            keys = [k for k in busy if k not in self._dests]
            if len(keys) > ADOPT_KEYS:
                keys = self.core.rng.sample(keys, ADOPT_KEYS)
            keys = [k for k in keys if self.core.next_pull_ms(
                tenant=k[0], channel=k[1], until_ms=now - ADOPT_LAG_MS) is not None]
        except StoreError:
            return
        with self._plock:
            self._pulls[True].extend((key, self.settings.min_rows, True) for key in keys)

    def _puller_epoch(self, now: int) -> int:
        """The puller's epoch, a new one every :data:`PULL_EPOCH_MS`."""
        if self._pull_epoch is None or now - self._pull_epoch[1] > PULL_EPOCH_MS:
            self._pull_epoch = (self.core.next_epoch(now), now)
        return self._pull_epoch[0]


def _results(future: concurrent.futures.Future[list[Result]] | asyncio.Future[list[Result]],
             name: str,
             envelopes: Sequence[Envelope]) -> list[Result]:
    """A finished asynchronous send's results (RETRY for each when it failed)."""
    try:
        return future.result()
    except BaseException as exc:  # cancelled (the loop stopped), or broken
        return [Result(e.delivery_id, Outcome.RETRY, f"channel {name!r} failed: {exc!r}"[:1000])
                for e in envelopes]


class _Chunk(NamedTuple):
    """A chunk on its way to its channel: the rows, their envelopes, the destination's spec,
    when the send started, the envelopes to send and the answers for those too old to."""

    key: Key
    flight: int
    rows: list[ClaimedRow]
    envelopes: list[Envelope]
    spec: ChannelSpec | None
    started: int
    live: list[Envelope]
    expired: list[Result]


class _SendJob:
    """A send worker's job: one step's chunks (a callable, so the pools need no closures)."""

    __slots__ = ("backlog", "chunks", "engine")

    def __init__(self, engine: Engine, chunks: list[tuple[Key, int, list[ClaimedRow]]],
                 backlog: bool) -> None:
        self.engine, self.chunks, self.backlog = engine, chunks, backlog

    def __call__(self) -> None:
        self.engine.send_chunks(self.chunks, backlog=self.backlog)

"""A destination's state in the delivery engine, and every decision about it.

A *destination* is one channel of one tenant. The engine (:mod:`tocsin.dispatcher.engine`)
keeps one :class:`Destination` per destination that has work, in a dict, and forgets it when
it goes idle. Everything the engine decides about one — what to send now, what is too old to
send, whether to hold it in the store (busy or open), whether to pull its backlog, when to look
again — is :func:`plan`, a function of the state and the instant ``now`` alone, with no clock,
no store, no thread: a test steps it on numbers. The results of the engine's workers come
back through :func:`sent`, :func:`acknowledged` and :func:`pulled`, which only change the
state. Only the engine's loop calls them, so each destination has one decision owner.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field

from tocsin.abc import ChannelHold, ClaimedRow
from tocsin.dispatcher.breaker import Breaker, BreakerPolicy, BreakerState
from tocsin.dispatcher.knobs import (
    AHEAD_CHUNKS,
    BACKLOG_LAG_MS,
    CLAIM_ROWS,
    HOLD_MS,
    PULL_CHUNKS,
    SEND_GRACE_MS,
)
from tocsin.domain import HoldReason, Outcome

__all__ = ["Destination", "EngineSettings", "Flight", "Plan", "acknowledged", "idle", "is_backlog",
           "offer", "plan", "pulled", "room", "sent"]


@dataclass(frozen=True, kw_only=True, slots=True)
class EngineSettings:
    """How much a destination queues, how long a send may take, and the breaker."""

    room_s: float = 0.25
    """Seconds of the destination's own measured sending its queue holds."""
    min_rows: int = 256
    """The smallest room; a destination holding this many rows has a backlog (it pulls)."""
    max_rows: int = 2 * CLAIM_ROWS
    """The largest room."""
    chunk_rows: int = CLAIM_ROWS
    """Most rows handed to the channel in one send."""
    send_deadline_ms: int = 30_000
    """The operator's cap on one send; the engine gives up :data:`SEND_GRACE_MS` after it."""
    max_wait_ms: int = 60_000
    """A row queued longer than this is handed back unsent (half the lease)."""
    send_threads: int = 8
    """Threads that run sends of channels whose clients block (the pool is fixed)."""
    breaker: BreakerPolicy = field(default_factory=BreakerPolicy)


@dataclass(frozen=True, slots=True)
class Flight:
    """A chunk handed to a send worker, not answered yet."""

    rows: list[ClaimedRow]
    started_ms: int


@dataclass(eq=False, slots=True)
class Destination:
    """One destination's state: its queue, what is out, its pace, breaker, hold and pull."""

    key: tuple[str, str]
    breaker: Breaker
    queue: deque[tuple[int, ClaimedRow]] = field(default_factory=deque)
    """Rows waiting to be sent, with the instant each was queued."""
    ids: set[str] = field(default_factory=set)
    """Ids of every row the destination has (queued, out, or awaiting its acknowledgement)."""
    flights: dict[int, Flight] = field(default_factory=dict)
    """Chunks being sent, by flight number."""
    last_flight: int = 0
    sending: int = 0
    """Rows taken from the queue and not yet acknowledged (out, or being written)."""
    rate: float = 0.0
    """Rows a second acknowledged (a moving average)."""
    last_ack_ms: int = 0
    weight: int = 1
    """Its tenant's weight: the room is this many times larger."""
    busy_since: int | None = None
    """When this process last wrote its busy hold (None: it holds none)."""
    pulling: bool = False
    """It has a backlog or a fast stream: it is held, and the puller takes its next rows."""
    behind: bool = False
    """Its last pull found a row due :data:`BACKLOG_LAG_MS` ago or more (:func:`is_backlog`)."""
    pull_out: bool = False
    """A pull for it is with the puller."""
    linger_until: int | None = None
    """A backlog that caught up: the instant its next schedule falls due."""


@dataclass(kw_only=True, slots=True)
class Plan:
    """What the engine does for one destination now (:func:`plan`)."""

    chunks: list[tuple[int, list[ClaimedRow]]] = field(default_factory=list)
    """To send (at most one): its flight number (already among the destination's flights)
    and its rows."""
    stale: list[ClaimedRow] = field(default_factory=list)
    """Queued too long: to hand back unsent."""
    overdue: list[int] = field(default_factory=list)
    """Flights past the send deadline: answered RETRY, their channel rebuilt."""
    hold: ChannelHold | None = None
    """A busy hold to write (or renew)."""
    unhold: list[HoldReason] = field(default_factory=list)
    """Holds to end."""
    pull: int = 0
    """Rows to ask the puller for."""
    wake_ms: int | None = None
    """When to look again (None: when something happens)."""


def room(d: Destination, s: EngineSettings) -> int:
    """Rows the destination takes before it is held: its measured rate times ``room_s``,
    within ``[min_rows, max_rows]``, times its tenant's weight."""
    return max(s.min_rows, min(s.max_rows, int(d.rate * s.room_s))) * d.weight


def offer(d: Destination, rows: Sequence[ClaimedRow], now: int) -> list[ClaimedRow]:
    """Queue ``rows`` (a replay's rows already here are skipped); those to hand back at once
    (its breaker is open and not due a probe) are returned."""
    if d.breaker.state is BreakerState.OPEN and now < d.breaker.until_ms:
        return list(rows)
    for row in rows:
        if row.id not in d.ids:
            d.ids.add(row.id)
            d.queue.append((now, row))
    return []


def _may_send(d: Destination, s: EngineSettings) -> int:
    """How many rows the next chunk may take (0: none now). One send at a time per
    destination (a channel sends a chunk's rows concurrently itself): a destination that
    hangs holds one send worker, never the pool, and its breaker sees each answer before the
    next send. At most :data:`AHEAD_CHUNKS` chunks wait for their acknowledgement."""
    state = d.breaker.state
    if state is BreakerState.OPEN or not d.queue or d.flights:
        return 0
    if state is BreakerState.PROBING:
        return 1
    return s.chunk_rows if d.sending < AHEAD_CHUNKS * s.chunk_rows else 0


def plan(d: Destination, now: int, s: EngineSettings, *, holder: str,
         stopping: bool = False) -> Plan:
    """Decide for ``d`` at ``now`` (changing ``d`` to match): see :class:`Plan`.
    ``stopping``: hand back the whole queue, pull nothing, end this process's hold."""
    p = Plan()
    tenant, name = d.key
    b = d.breaker
    if b.due_probe(now):
        p.unhold.append(HoldReason.OPEN)
    deadline = s.send_deadline_ms + SEND_GRACE_MS
    p.overdue = [n for n, f in d.flights.items() if now - f.started_ms >= deadline]
    if stopping:
        p.stale = [row for _, row in d.queue]
        d.queue.clear()
        d.pulling, d.linger_until = False, None
    while d.queue and now - d.queue[0][0] > s.max_wait_ms:
        p.stale.append(d.queue.popleft()[1])
    d.ids.difference_update(r.id for r in p.stale)
    if (n := _may_send(d, s)) > 0:
        chunk = [d.queue.popleft()[1] for _ in range(min(n, len(d.queue)))]
        d.sending += len(chunk)
        d.last_flight += 1
        d.flights[d.last_flight] = Flight(chunk, now)
        p.chunks.append((d.last_flight, chunk))
    queued = len(d.queue) + d.sending
    r = room(d, s)
    if d.pulling and b.state is not BreakerState.CLOSED:
        d.pulling, d.linger_until = False, None
    elif not d.pulling and not stopping and b.state is BreakerState.CLOSED \
            and queued >= s.min_rows:
        d.pulling = True  # a backlog: the destination is held and takes its next rows itself
        d.behind = False  # until a pull says otherwise
    if (queued >= r or d.pulling) and not stopping:
        if d.busy_since is None or now - d.busy_since >= HOLD_MS // 2:
            p.hold = ChannelHold(tenant, name, HoldReason.BUSY, now, now + HOLD_MS, 0, None,
                                 holder)
            d.busy_since = now
    elif d.busy_since is not None and (stopping or queued <= r // 2):
        p.unhold.append(HoldReason.BUSY)
        d.busy_since = None
    if d.pulling and not d.pull_out and (d.linger_until is None or now >= d.linger_until):
        target = min(r, PULL_CHUNKS * s.chunk_rows)
        low = target - max(1, min(s.chunk_rows, target) // 2)
        if queued <= low:
            p.pull = min(s.chunk_rows, target - queued)
            d.pull_out, d.linger_until = True, None
    p.wake_ms = _wake(d, s, deadline, r)
    return p


def _wake(d: Destination, s: EngineSettings, deadline: int, r: int) -> int | None:
    """The next instant something about ``d`` changes by time alone."""
    times: list[int] = []
    if d.queue:
        times.append(d.queue[0][0] + s.max_wait_ms + 1)
    if d.breaker.state is BreakerState.OPEN:
        times.append(d.breaker.until_ms)
    if d.busy_since is not None and (d.pulling or len(d.queue) + d.sending >= r):
        times.append(d.busy_since + HOLD_MS // 2)
    if d.linger_until is not None and d.pulling and not d.pull_out:
        times.append(d.linger_until)
    times.extend(f.started_ms + deadline for f in d.flights.values())
    return min(times) if times else None


def sent(d: Destination, flight: int, outcomes: Sequence[tuple[Outcome, str | None]],
         now: int, *, holder: str = "") -> tuple[ChannelHold | None, list[ClaimedRow]]:
    """A flight's answers came back (or its deadline passed): feed the breaker. When that
    opened it, the hold to write (reason ``open``) and the queue, to hand back."""
    d.flights.pop(flight, None)
    opened = False
    for outcome, error in outcomes:
        opened = d.breaker.record(outcome, error, now_ms=now) or opened
    if not opened:
        return None, []
    b = d.breaker
    back = [row for _, row in d.queue]
    d.queue.clear()
    d.ids.difference_update(r.id for r in back)
    return ChannelHold(d.key[0], d.key[1], HoldReason.OPEN, b.since_ms, b.until_ms, b.failures,
                       b.last_error), back


def acknowledged(d: Destination, ids: Sequence[str], started_ms: int, now: int) -> None:
    """Verdicts on ``ids`` (sent from ``started_ms``) are written: they are no longer the
    destination's, and its pace is what it gets acknowledged (measured over the send alone,
    a fast file channel's room outgrew what the store could take)."""
    d.sending -= len(ids)
    d.ids.difference_update(ids)
    cycle = now - max(d.last_ack_ms, started_ms)
    d.last_ack_ms = now
    if cycle > 0 and ids:
        sample = len(ids) * 1000 / cycle
        d.rate = sample if d.rate == 0 else 0.7 * d.rate + 0.3 * sample


def pulled(d: Destination, rows: Sequence[ClaimedRow], want: int, next_due: int | None,
           now: int) -> list[ClaimedRow]:
    """The puller answered: queue its rows (those to hand back are returned), and note
    whether they were behind. Fewer than asked: the backlog caught up, and lingers until
    ``next_due`` (None: it is over)."""
    d.pull_out = False
    d.behind = bool(rows) and now - min(r.due_ms for r in rows) >= BACKLOG_LAG_MS
    back = offer(d, rows, now) if d.pulling else list(rows)
    if len(rows) < want:
        if next_due is None:
            d.pulling, d.linger_until = False, None
        else:
            d.linger_until = next_due
    return back


def is_backlog(d: Destination) -> bool:
    """Whether ``d`` pulls rows that are behind: its pulls, sends and acknowledgements yield
    to on-time work (:data:`~tocsin.dispatcher.knobs.BACKLOG_NICE`). A destination that pulls
    because its stream is fast, on time, keeps the dispatcher's priority."""
    return d.pulling and d.behind


def idle(d: Destination) -> bool:
    """Nothing queued, out, pulled or held, and a breaker with nothing to remember: the
    engine forgets it (the next work makes a new one)."""
    return not (d.queue or d.sending or d.flights or d.pulling or d.pull_out
                or d.busy_since is not None or d.breaker.state is not BreakerState.CLOSED
                or d.breaker.failures)

"""Hand-over windows: a schedule goes to its channel at its due instant, not at the next trigger.

A micro-batch claims what is due and delivers it; then each task stays with its bucket range
until its window ends, and hands each further schedule over at its due time::

    loop until the window's end:
        next = store.next_claimable_ms(range, until=end)    a read (throttled ones too)
        sleep until next (at most POLL_MS, then look again: new schedules, cancels, tokens)
        claim what is due now (the window's epoch)          the compare-and-set
        hand it to the delivery engine (it sends and acknowledges; the window does not wait)

The claim at the due instant is the hand-over: a cancel that commits before it wins, one after
it finds the schedule CLAIMED and answers 409 — the same compare-and-set as a micro-batch's
claim, so ``DELETE`` means what it always meant. Nothing is claimed ahead of its time.

Windows end on a grid (multiples of the window, ``hand_over_ms``), at least half a window after
they open, so every task of a batch ends together and the next batch starts at once. Between
two batches (commit, planning, task launch) the *relay* query covers the gap: one task over
every bucket whose windows are shifted half a window, which hands over only at the start of
each period, right after the main windows end (:func:`relay_zone`).

Each dispatcher of a membership shifts its grid by a fraction of the window that its slot
picks (:func:`grid_shift_ms`: 0, 1/2, 1/4, 3/4, …), so the members' batch turns, the heaviest
moment of each (Spark plans the next batch and starts its tasks), do not fall on the same
instant: on two cores two members' turns at once kept the machine at 100 % for half a second
every window, and each member's claims and hand-overs waited behind the other's.

A window ends early when the store does not answer (nothing is claimed in it that the next
micro-batch cannot take), and stops with its query within a window. A window takes only claims
that a dead run released (``claimed_ms`` 0); a lease that ended is
the micro-batch's to reclaim. With ``wait=False`` (the in-process runner) a window does not
wait: it claims again while the last claim held a keyed row, so a key's due run goes out in
order within one task, not one schedule per micro-batch.
"""

from __future__ import annotations

from collections.abc import Sequence

from tocsin.abc import ClaimedRow
from tocsin.dispatcher.core import BucketSpan, DispatchCore, log
from tocsin.dispatcher.deliver import Tally
from tocsin.dispatcher.knobs import (
    AHEAD_ROWS,
    BACKSTOP_MS,
    CLAIM_ROWS,
    COVER_MS,
    KEY_RUN_BUDGET_MS,
    LOOK_AHEAD,
    POLL_MS,
    RACE_PAUSE_MS,
    READER_LAG_MS,
    RELAY_ZONE_MS,
)
from tocsin.errors import StoreError

__all__ = ["AHEAD_ROWS", "KEY_RUN_BUDGET_MS", "POLL_MS", "RACE_PAUSE_MS", "grid_shift_ms", "hold",
           "key_runs", "race_pause_until", "relay_zone", "released_only", "window_end"]


def grid_shift_ms(slot: int, window_ms: int) -> int:
    """The shift of the window grid of the dispatcher in membership slot ``slot``: the
    window times the slot's bits read backwards as a binary fraction (slot 0: 0, 1: 1/2, 2:
    1/4, 3: 3/4, 4: 1/8, …), so any number of members' turns fall apart, the first two half
    a window apart."""
    fraction, weight = 0.0, 0.5
    while slot > 0:
        fraction += weight * (slot & 1)
        slot, weight = slot >> 1, weight / 2
    return int(window_ms * fraction)


def window_end(now_ms: int, window_ms: int, *, shift_ms: int = 0) -> int:
    """The first instant of the grid ``k * window_ms + shift_ms`` at least half a window after
    ``now_ms``: where a window opened at ``now_ms`` ends."""
    half = now_ms + window_ms // 2 - shift_ms
    return -(-half // window_ms) * window_ms + shift_ms


def relay_zone(now_ms: int, window_ms: int, *, shift_ms: int = 0) -> tuple[int, int]:
    """The relay's next zone ``[start, end)``: the start of the period of the main grid
    (shifted by ``shift_ms``) that holds ``now_ms``, for :data:`RELAY_ZONE_MS` or half the
    window, whichever is shorter; or the next period's when ``now_ms`` is past it."""
    length = min(window_ms // 2, RELAY_ZONE_MS)
    start = (now_ms - shift_ms) // window_ms * window_ms + shift_ms
    if now_ms - start >= length:
        start += window_ms
    return start, start + length


def race_pause_until(at_ms: int, misses: int, window_ms: int, *, relay: bool,
                     shift_ms: int = 0) -> int:
    """Until when a window waits after its ``misses + 1``-th claim in a row that found nothing
    it had been told was due (:data:`RACE_PAUSE_MS`, doubling up to :data:`POLL_MS`): a
    main window no later than the end of the relay's zone it is in. A main window that opens
    late, inside the relay's zone, loses each due row to the relay there and backs off; when
    the zone ended it slept on for up to a poll while rows fell due (61 ms late at 200/s on
    PostgreSQL). ``shift_ms``: the grid's (:func:`grid_shift_ms`)."""
    until = at_ms + min(POLL_MS, RACE_PAUSE_MS << misses)
    if relay or window_ms <= 0:
        return until
    start, stop = relay_zone(at_ms, window_ms, shift_ms=shift_ms)
    return min(until, stop) if start <= at_ms else until


def released_only(now_ms: int) -> int:
    """The ``lease_ms`` with which a claim reclaims only what a dead run released
    (``claimed_ms`` 0), never a lease that merely ended."""
    return now_ms - 1


def key_runs(core: DispatchCore, partition: int, rows: Sequence[ClaimedRow], *,
             started_ms: int) -> tuple[Tally, int]:
    """Without a window: when ``rows`` (a task's claim) held a keyed row, keep claiming the
    range's next heads for :data:`KEY_RUN_BUDGET_MS` from ``started_ms``, so a key's due run
    goes out in order within the task rather than one schedule per micro-batch. The tally and
    how many more it claimed (nothing when no row was keyed)."""
    if not any(r.ordering_key is not None for r in rows):
        return Tally(), 0
    return hold(core, partition, wait=False, end_ms=started_ms + KEY_RUN_BUDGET_MS)


def hold(core: DispatchCore, partition: int, *, end_ms: int, wait: bool = True,
         relay: bool = False, span: BucketSpan | None = None,
         cover: str = "") -> tuple[Tally, int]:
    """Keep ``partition``'s range (or ``span``'s buckets) until ``end_ms``, handing each
    schedule over at its due time (``relay``: inside :func:`relay_zone`, and outside it what
    nobody took :data:`BACKSTOP_MS` after it fell due; ``cover``: in the buckets that run owns,
    :mod:`tocsin.dispatcher.cover`). The window's tally and how many it claimed."""
    tally, claimed = Tally(), 0
    store, clock, opts = core.store, core.clock, core.options
    owner = cover or opts.run  # whose buckets (and holds) the window looks at
    span = span or core.span(partition)
    limit = min(span.limit, CLAIM_ROWS)  # also without a window (wait=False)
    epoch: int | None = None
    misses, full = 0, False
    covering = 0  # the relay hands over outside its zone until then (a gap it found)
    ahead: list[int] = []  # the next due instants the last look found, claimed in turn
    looked_ms = claimed_ms = 0  # when the last look was, and what the last claim took up to
    keys_out = False  # whether it sent keyed rows (their acknowledgements free the next heads)
    while (now := clock.now_ms()) < end_ms:
        horizon = end_ms
        if relay:
            start, stop = relay_zone(now, opts.hand_over_ms, shift_ms=opts.grid_ms)
            if now < start and now >= covering:
                try:
                    first = store.next_claimable_ms(
                        bucket_lo=span.lo, bucket_hi=span.hi, until_ms=min(start, end_ms),
                        now_ms=now, lease_ms=released_only(now), run=opts.run)
                except StoreError as exc:
                    log.warning("hand-over window ends early, store unavailable: %s", exc)
                    break
                if first is None or not now - READER_LAG_MS < first <= now - BACKSTOP_MS:
                    # nothing left behind: wait for the zone, a new schedule or a backstop
                    wake = now + POLL_MS if first is None or first <= now - READER_LAG_MS \
                        else min(first + BACKSTOP_MS, now + POLL_MS)
                    core.pause_until(min(start, end_ms, wake))
                    continue
                covering = now + COVER_MS  # nobody took it: the main window is not there
            horizon = min(stop if now >= start else covering, end_ms)
        if full:  # the engine's queues are full: wait for a chunk to finish first (the
            # busy holds are written by the engine's writer, behind this window's claims)
            held = clock.now_ms() + POLL_MS
            while core.engine.queued() >= AHEAD_ROWS and (left := held - clock.now_ms()) > 0:
                core.engine.wait(left / 1000)
        try:
            ahead = [t for t in ahead if t > claimed_ms]  # the last claim took those
            following = not full and bool(ahead) and now < looked_ms + POLL_MS \
                and ahead[0] <= horizon
            if following:  # the next instant the last look found, without asking again
                due: int | None = ahead[0]
            elif full:  # more is due at once: claim again without asking (the ask was 5 % of
                due = now  # a window's CPU in a burst, where every claim is full)
            else:  # in the buckets its run owns
                times = store.claimable_times(
                    bucket_lo=span.lo, bucket_hi=span.hi, until_ms=horizon, now_ms=now,
                    lease_ms=released_only(now), run=owner, count=LOOK_AHEAD)
                looked_ms, due, ahead = now, times[0] if times else None, times
            if due is None or due > now + POLL_MS:
                if not wait:
                    break
                core.pause_until(min(now + POLL_MS, horizon))
                continue
            if due > now:
                if not wait:
                    break
                core.pause_until(due)  # a chunk that finishes ends it early: a key's next
                if not keys_out and clock.now_ms() < due:  # head may be claimable, if the
                    continue  # window sent keyed rows; else it waits on (claimed, found none)
            if epoch is None:
                epoch = store.next_epoch(run=opts.run, now_ms=now)
            at = clock.now_ms()
            rows = store.claim(epoch=epoch, bucket_lo=span.lo, bucket_hi=span.hi, until_ms=at,
                               now_ms=at, lease_ms=released_only(at), limit=limit,
                               replay=False, cover=cover)
        except StoreError as exc:  # nothing is claimed: the next micro-batch takes over
            log.warning("hand-over window ends early, store unavailable: %s", exc)
            break
        full, claimed_ms = len(rows) >= limit, at
        if not rows:
            if not wait:
                break
            if cover:  # another took it: the member covered claims again (or another
                break  # cover does); the cover looks whether anything is still overdue
            ahead = []  # what the look had seen went another way (a cancel, a reschedule,
            if following:  # another task): look again, at once when it was not just now
                continue
            # Another task took it, a cancel won, or a policy has no free token: look again
            # soon, then less often (a saturated policy frees a token when a delivery ends).
            core.pause_until(race_pause_until(at, misses, opts.hand_over_ms, relay=relay,
                                              shift_ms=opts.grid_ms))
            misses = min(misses + 1, 8)
            continue
        misses = 0
        claimed += len(rows)
        keyed = any(r.ordering_key is not None for r in rows)
        keys_out = keys_out or keyed
        if keyed:  # a key's next head is claimable once this one is acknowledged: look for it
            ahead = []
        tally.add(core.deliver(rows))
        if not wait:
            if not keyed:
                break
            # the next heads are claimable once these are acknowledged
            core.engine.drain(max(end_ms - clock.now_ms(), 0) / 1000)
    tally.add(core.collect())
    return tally, claimed

"""The engine's decisions about one destination, on numbers: no store, no thread, no sleep.
Time is a :class:`~tocsin.clock.ManualClock` moved by hand."""

from __future__ import annotations

from tocsin.abc import ClaimedRow
from tocsin.clock import ManualClock
from tocsin.dispatcher.breaker import Breaker, BreakerPolicy, BreakerState
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
    AHEAD_CHUNKS,
    BACKLOG_LAG_MS,
    HOLD_MS,
    PULL_CHUNKS,
    SEND_GRACE_MS,
)
from tocsin.domain import HoldReason, Outcome

SETTINGS = EngineSettings(min_rows=4, max_rows=40, chunk_rows=2, room_s=1.0,
                          send_deadline_ms=1_000, max_wait_ms=10_000,
                          breaker=BreakerPolicy(failures=2, open_ms=500, max_open_ms=4_000))
ME = "host:1"


def rows(n: int, start: int = 0, epoch: int = 1) -> list[ClaimedRow]:
    return [ClaimedRow(f"s{i}", "t", "c", b"{}", "json", "{}", 0, 0, None, None, epoch, 0)
            for i in range(start, start + n)]


def destination() -> Destination:
    return Destination(("t", "c"), Breaker(SETTINGS.breaker))


def test_one_send_at_a_time_and_at_most_ahead_chunks_unacknowledged() -> None:
    clock, d = ManualClock(0), destination()
    offer(d, rows(3), clock.now_ms())
    p = plan(d, clock.now_ms(), SETTINGS, holder=ME)
    assert [len(c) for _, c in p.chunks] == [2] and d.sending == 2 and list(d.flights) == [1]
    assert p.hold is None and not d.pulling
    assert plan(d, clock.now_ms(), SETTINGS, holder=ME).chunks == [], "one send at a time"
    sent(d, 1, [(Outcome.DELIVERED, None)] * 2, clock.now_ms())
    offer(d, rows(3, start=3), clock.now_ms())
    p = plan(d, clock.now_ms(), SETTINGS, holder=ME)
    assert [len(c) for _, c in p.chunks] == [2], "the next while the first is written"
    sent(d, 2, [(Outcome.DELIVERED, None)] * 2, clock.now_ms())
    assert AHEAD_CHUNKS * SETTINGS.chunk_rows == 4 == d.sending
    assert plan(d, clock.now_ms(), SETTINGS, holder=ME).chunks == [], "two chunks unwritten"
    clock.advance(100)
    acknowledged(d, ["s0", "s1"], 0, clock.now_ms())
    assert d.rate == 20.0  # two rows in 100 ms
    assert [len(c) for _, c in plan(d, clock.now_ms(), SETTINGS, holder=ME).chunks] == [2]


def test_a_replays_rows_are_not_queued_twice() -> None:
    d = destination()
    offer(d, rows(2), 0)
    offer(d, rows(3), 0)
    assert [r.id for _, r in d.queue] == ["s0", "s1", "s2"]


def test_a_full_destination_is_held_renewed_at_half_and_released_when_half_empty() -> None:
    clock, d = ManualClock(0), destination()
    d.breaker.failures = 0
    offer(d, rows(3), 0)
    d.pulling = False
    p = plan(d, 0, SETTINGS, holder=ME)
    assert p.hold is None, "3 rows < room 4"
    offer(d, rows(2, start=3), 0)
    p = plan(d, 0, SETTINGS, holder=ME)
    assert p.hold is not None and p.hold.reason is HoldReason.BUSY and p.hold.holder == ME
    assert p.hold.until_ms == HOLD_MS and d.pulling, "a backlog: it pulls"
    assert p.pull == 0, "no room for half a chunk yet"
    clock.advance(HOLD_MS // 2 - 1)
    assert plan(d, clock.now_ms(), SETTINGS, holder=ME).hold is None
    clock.advance(1)
    renewed = plan(d, clock.now_ms(), SETTINGS, holder=ME).hold
    assert renewed is not None and renewed.until_ms == clock.now_ms() + HOLD_MS
    # the backlog caught up and is over: the hold ends once half empty
    acknowledged(d, [f"s{i}" for i in range(4)], 0, clock.now_ms())
    d.pull_out = True
    pulled(d, [], 2, None, clock.now_ms())
    assert not d.pulling
    p = plan(d, clock.now_ms(), SETTINGS, holder=ME)
    assert p.unhold == [HoldReason.BUSY] and d.busy_since is None


def test_a_backlog_pulls_as_it_has_room_and_lingers_for_its_next_instant() -> None:
    clock, d = ManualClock(0), destination()
    offer(d, rows(4), 0)
    plan(d, 0, SETTINGS, holder=ME)  # four rows: a backlog
    assert d.pulling
    sent(d, 1, [(Outcome.DELIVERED, None)] * 2, 50)
    plan(d, 50, SETTINGS, holder=ME)
    sent(d, 2, [(Outcome.DELIVERED, None)] * 2, 60)
    acknowledged(d, ["s0", "s1", "s2", "s3"], 0, 100)
    p = plan(d, 100, SETTINGS, holder=ME)
    target = min(room(d, SETTINGS), PULL_CHUNKS * SETTINGS.chunk_rows)
    assert p.pull == min(SETTINGS.chunk_rows, target) and d.pull_out
    assert plan(d, 100, SETTINGS, holder=ME).pull == 0, "one pull out at a time"
    # fewer than asked: caught up; the next schedule falls due at 150
    assert pulled(d, rows(1, start=10), p.pull, 150, 120) == []
    assert d.pulling and d.linger_until == 150
    p = plan(d, 120, SETTINGS, holder=ME)
    assert [len(c) for _, c in p.chunks] == [1] and p.pull == 0 and p.wake_ms == 150
    clock.set(150)
    assert plan(d, 150, SETTINGS, holder=ME).pull > 0, "pulls on at the instant"


def test_a_pulling_destination_is_a_backlog_only_while_its_pulls_find_rows_behind() -> None:
    """A fast stream on time pulls too (its queue fills between sends); only rows due
    BACKLOG_LAG_MS ago or more make it a backlog that yields the CPU, and a new pulling spell
    starts on time until its first pull says otherwise."""
    d = destination()
    offer(d, rows(4), 0)
    plan(d, 0, SETTINGS, holder=ME)
    assert d.pulling and not is_backlog(d), "pulling, but nothing says it is behind"
    now = 10 * BACKLOG_LAG_MS  # rows() are due at 0
    pulled(d, rows(2, start=4), 100, None, BACKLOG_LAG_MS - 1)
    assert not is_backlog(d), "due less than BACKLOG_LAG_MS ago: on time"
    d.pulling = True
    pulled(d, rows(2, start=6), 100, 5, now)
    assert is_backlog(d), "a row due long ago: behind"
    pulled(d, [], 100, 5, now)
    assert not is_backlog(d), "a pull that found nothing is not behind"
    d.behind, d.pulling = True, False
    d.queue.clear()
    d.ids.clear()
    offer(d, rows(4, start=20), now)
    plan(d, now, SETTINGS, holder=ME)
    assert d.pulling and not is_backlog(d), "a new spell starts on time"


def test_rows_queued_too_long_are_handed_back_and_woken_for() -> None:
    d = destination()
    offer(d, rows(6), 0)
    p = plan(d, 0, SETTINGS, holder=ME)
    assert p.wake_ms == SETTINGS.send_deadline_ms + SEND_GRACE_MS, "the flights' deadline"
    p = plan(d, SETTINGS.max_wait_ms + 1, SETTINGS, holder=ME)
    assert [r.id for r in p.stale] == ["s2", "s3", "s4", "s5"] and not d.queue
    assert "s4" not in d.ids and "s0" in d.ids


def test_a_send_past_its_deadline_is_overdue() -> None:
    from tocsin.dispatcher.destination import Flight

    d = destination()
    d.flights[7] = Flight(rows(1), 0)
    assert plan(d, 2_999, SETTINGS, holder=ME).overdue == []
    assert plan(d, 1_000 + SEND_GRACE_MS, SETTINGS, holder=ME).overdue == [7]


def test_failures_open_the_breaker_hold_the_destination_and_hand_back_the_queue() -> None:
    d = destination()
    offer(d, rows(3), 0)
    p = plan(d, 0, SETTINGS, holder=ME)
    assert [n for n, _ in p.chunks] == [1] and p.hold is None
    hold, back = sent(d, 1, [(Outcome.RETRY, "503"), (Outcome.RETRY, "503")], 10)
    assert d.breaker.state is BreakerState.OPEN
    assert hold is not None and hold.reason is HoldReason.OPEN and hold.until_ms == 510
    assert hold.failures == 2 and hold.last_error == "503"
    assert [r.id for r in back] == ["s2"] and not d.queue
    assert offer(d, rows(1, start=9), 100) != [], "open: handed back at once"
    p = plan(d, 510, SETTINGS, holder=ME)
    assert p.unhold == [HoldReason.OPEN] and d.breaker.state is BreakerState.PROBING
    offer(d, rows(2, start=20), 510)
    p = plan(d, 510, SETTINGS, holder=ME)
    assert [len(c) for _, c in p.chunks] == [1], "the probe goes alone"
    assert plan(d, 510, SETTINGS, holder=ME).chunks == [], "the others wait for its answer"
    hold, _ = sent(d, 2, [(Outcome.DELIVERED, None)], 520)
    assert hold is None and d.breaker.state is BreakerState.CLOSED


def test_a_tenants_weight_scales_the_room() -> None:
    d = destination()
    assert room(d, SETTINGS) == SETTINGS.min_rows
    d.rate = 30.0
    assert room(d, SETTINGS) == 30
    d.weight = 3
    assert room(d, SETTINGS) == 90
    d.rate = 1e9
    assert room(d, SETTINGS) == 3 * SETTINGS.max_rows


def test_an_idle_destination_is_forgotten_unless_its_breaker_remembers() -> None:
    d = destination()
    assert idle(d)
    d.breaker.record(Outcome.RETRY, "503", now_ms=0)
    assert not idle(d)
    d.breaker.record(Outcome.DELIVERED, None, now_ms=1)
    assert idle(d)


def test_stopping_hands_back_everything_and_ends_the_hold() -> None:
    d = destination()
    offer(d, rows(10), 0)
    plan(d, 0, SETTINGS, holder=ME)
    assert d.busy_since == 0 and d.pulling
    p = plan(d, 1, SETTINGS, holder=ME, stopping=True)
    assert len(p.stale) == 8 and p.unhold == [HoldReason.BUSY] and p.chunks == []
    assert not d.pulling and p.pull == 0

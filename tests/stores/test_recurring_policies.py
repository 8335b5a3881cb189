"""Recurring schedules, their expansion, and throttling policies, on every backend.

Expansion runs here through :func:`~tocsin.dispatcher.expander.expand_due`, the function the
Spark expansion query runs on its executors, driven by explicit clock values: downtime is a
jump of ``now``, not real waiting."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path

import pytest

from tocsin.abc import Store
from tocsin.dispatcher.expander import expand_due
from tocsin.domain import (
    CronTrigger,
    MisfirePolicy,
    Policy,
    Recurring,
    Status,
    firing_schedule_id,
)
from tocsin.errors import ConflictError, NotFoundError, ValidationError

from .conftest import BUCKETS
from .test_store import ack, claim, new

MIN = 60_000
T0 = 1_700_000_040_000 - 1_700_000_040_000 % MIN  # a whole minute
HORIZON = 10 * MIN


def rec(rid: str = "rec-1", *, expr: str = "* * * * *", **fields: object) -> Recurring:
    fields.setdefault("channel", "out")
    fields.setdefault("payload", b'{"tick":1}')
    fields.setdefault("trigger", CronTrigger.parse(expr, "UTC"))
    return Recurring(id=rid, **fields)  # type: ignore[arg-type]


def expand_all(store: Store, now_ms: int) -> int:
    return expand_due(store, bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=now_ms,
                      horizon_ms=HORIZON).messages


def messages(store: Store, rid: str) -> dict[int, list[str]]:
    """firing_ms → ids of the recurring's schedules that are not cancelled."""
    out: dict[int, list[str]] = {}
    for s in store.list_schedules(limit=100_000):
        if s.recurring_id == rid and s.status is not Status.CANCELLED:
            out.setdefault(int(s.id.split(":")[-2]), []).append(s.id)
    return out


# -- recurring -------------------------------------------------------------------------------


def test_expansion_fills_the_horizon_once(store: Store) -> None:
    store.create_recurring(rec(count=3, stagger_ms=30_000), now_ms=T0)
    assert expand_all(store, T0) == 10 * 3
    assert expand_all(store, T0) == 0  # nothing due for expansion yet
    got = messages(store, "rec-1")
    assert sorted(got) == [T0 + m * MIN for m in range(1, 11)]
    first = store.get(firing_schedule_id("rec-1", T0 + MIN, 2))
    assert first.due_ms == T0 + MIN + 20_000  # message 2 of 3, spread over 30 s
    assert first.headers["Tocsin-Recurring-Id"] == "rec-1"
    # Five minutes on, the next expansion adds the minutes now inside the horizon, no repeats.
    assert expand_all(store, T0 + 5 * MIN) == 5 * 3
    assert sorted(messages(store, "rec-1")) == [T0 + m * MIN for m in range(1, 16)]


def test_an_interval_with_jitter_round_trips_and_expands_on_its_rhythm(store: Store) -> None:
    from tocsin.domain import IntervalTrigger
    from tocsin.domain.recurring import jitter_of

    every = IntervalTrigger(every_ms=90_000, anchor_ms=T0 + 15_000)
    made = store.create_recurring(rec(trigger=every, jitter_ms=20_000), now_ms=T0)
    assert made.trigger == every and made.jitter_ms == 20_000
    assert store.get_recurring("rec-1") == made
    assert expand_all(store, T0) == 7  # (T0, T0 + 10 min] holds 7 firings 90 s apart
    firings = sorted(messages(store, "rec-1"))
    assert firings == [T0 + 15_000 + k * 90_000 for k in range(7)]
    for t in firings:  # each due its firing's own jitter later, as every expansion computes it
        due = store.get(firing_schedule_id("rec-1", t, 0)).due_ms
        assert due == t + jitter_of(made, t) and 0 <= due - t <= 20_000
    changed = store.update_recurring(dataclasses.replace(made, trigger=CronTrigger.parse(
        "* * * * *", "UTC"), jitter_ms=0), now_ms=T0)
    assert isinstance(changed.trigger, CronTrigger) and changed.jitter_ms == 0


def test_an_expansion_read_before_a_change_is_not_recorded(store: Store) -> None:
    """Two expanders (a replayed batch, a double deploy) racing: the loser adds nothing."""
    store.create_recurring(rec(), now_ms=T0)
    [stale] = store.recurring_due(bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=T0, limit=10)
    assert expand_all(store, T0) == 10
    from tocsin.dispatcher.expander import messages_of
    from tocsin.domain import expand

    expansion = expand(stale, from_ms=T0, now_ms=T0 + MIN, horizon_ms=HORIZON)
    assert store.record_expansions([(stale, expansion, messages_of(stale, expansion), None)],
                                   now_ms=T0 + MIN) == 0
    assert len(messages(store, "rec-1")) == 10


@pytest.mark.parametrize(("policy", "fired", "reasons"), [
    (MisfirePolicy.FIRE_ONCE, 1, {"misfire: coalesced": 9}),
    (MisfirePolicy.FIRE_ALL, 10, {}),
    (MisfirePolicy.SKIP, 0, {"misfire: skipped": 10}),
])
def test_misfire_after_ten_minutes_down(store: Store, policy: MisfirePolicy, fired: int,
                                        reasons: dict[str, int]) -> None:
    """Expanded at T0 with a 1-minute horizon, then down until T0 + 11 min: the firings of
    minutes 2..11 were missed (older than the 30 s grace, except minute 11 itself)."""
    store.create_recurring(rec(misfire=policy, misfire_grace_ms=30_000), now_ms=T0)
    expand_due(store, bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=T0, horizon_ms=MIN)
    back = T0 + 11 * MIN + 40_000
    tally = expand_due(store, bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=back, horizon_ms=MIN)
    assert tally.reasons == reasons
    missed = range(2, 12)  # minutes 2..11: all more than 30 s before `back`
    late = [s for s in store.list_schedules(limit=1000)
            if int(s.id.split(":")[-2]) in {T0 + m * MIN for m in missed}]
    assert len(late) == fired
    assert all(s.due_ms == back for s in late)  # a late firing fires at once
    records = {r.firing_ms: r for r in store.recurring_firings("rec-1")}
    for m in (1, *missed, 12):  # every firing accounted for, one way or the other
        record = records[T0 + m * MIN]
        assert record.outcome in ("expanded", "skipped")
        assert (record.outcome == "skipped") == (record.reason is not None)
    assert sum(1 for r in records.values() if r.outcome == "skipped") == sum(reasons.values())


def test_change_pause_resume_and_delete(store: Store) -> None:
    store.create_recurring(rec(), now_ms=T0)
    expand_all(store, T0)
    now = T0 + 90_000
    changed = store.update_recurring(
        dataclasses.replace(store.get_recurring("rec-1"), count=2), now_ms=now)
    assert changed.revision == 1 and changed.count == 2
    kept = messages(store, "rec-1")
    assert sorted(kept) == [T0 + MIN]  # minute 1 fired already; minutes 2.. are cancelled
    expand_all(store, now)
    after = messages(store, "rec-1")
    assert len(after[T0 + 2 * MIN]) == 2
    assert all(".r1:" in i for i in after[T0 + 2 * MIN])  # the new revision's own ids

    paused = store.update_recurring(dataclasses.replace(changed, paused=True), now_ms=now)
    assert paused.paused and sorted(messages(store, "rec-1")) == [T0 + MIN]
    expand_due(store, bucket_lo=0, bucket_hi=BUCKETS - 1, now_ms=T0 + 5 * MIN,
               horizon_ms=HORIZON)
    skipped = [r for r in store.recurring_firings("rec-1") if r.outcome == "skipped"]
    assert [r.firing_ms for r in skipped] == [T0 + m * MIN for m in (2, 3, 4, 5)]
    assert {r.reason for r in skipped} == {"paused"}

    store.update_recurring(dataclasses.replace(paused, paused=False), now_ms=T0 + 5 * MIN)
    expand_all(store, T0 + 5 * MIN)
    assert min(f for f in messages(store, "rec-1") if f > T0 + MIN) == T0 + 6 * MIN

    assert store.delete_recurring("rec-1", now_ms=T0 + 5 * MIN) == 20
    with pytest.raises(NotFoundError):
        store.get_recurring("rec-1")
    assert sorted(messages(store, "rec-1")) == [T0 + MIN]


def test_a_recurring_naming_an_unknown_policy_is_refused(store: Store) -> None:
    with pytest.raises(ValidationError) as err:
        store.create_recurring(rec(policy="nope"), now_ms=T0)
    assert err.value.field == "policy"
    assert store.list_recurring() == []


def test_list_is_paged_by_id(store: Store) -> None:
    for i in range(5):
        store.create_recurring(rec(f"rec-{i}", tenant="a" if i % 2 else "b"), now_ms=T0)
    assert [r.id for r in store.list_recurring(limit=2)] == ["rec-0", "rec-1"]
    assert [r.id for r in store.list_recurring(after_id="rec-1", limit=2)] == ["rec-2", "rec-3"]
    assert [r.id for r in store.list_recurring(tenant="a")] == ["rec-1", "rec-3"]


# -- policies --------------------------------------------------------------------------------


NOW = 1_700_000_000_000


def test_claims_never_exceed_max_in_flight(store: Store) -> None:
    store.put_policy(Policy(name="p", max_in_flight=3, token_lease_ms=60_000), now_ms=NOW)
    made = store.create([new(NOW - 100 + i, policy="p") for i in range(10)], now_ms=NOW)
    plain = store.create([new(NOW, channel="other")], now_ms=NOW)
    first = claim(store, store.next_epoch())
    assert {r.id for r in first} >= {plain[0][0].id}
    throttled = [r for r in first if r.id != plain[0][0].id]
    assert [r.id for r in throttled] == [s.id for s, _ in made[:3]]  # earliest first
    assert store.in_flight("p", tenant="default", now_ms=NOW) == 3
    assert claim(store, store.next_epoch()) == []  # every token is held
    # Delivered: the token stays held until the consumer releases it.
    epoch = throttled[0].epoch
    assert store.acknowledge(epoch=epoch, acks=[ack(r, Status.DELIVERED) for r in throttled],
                             now_ms=NOW) == 3
    assert claim(store, store.next_epoch()) == []
    assert store.release(f"{throttled[0].id}-1", now_ms=NOW)
    assert not store.release(f"{throttled[0].id}-1", now_ms=NOW)  # once only
    nxt = claim(store, store.next_epoch())
    assert [r.id for r in nxt] == [made[3][0].id]  # the earliest waiting one goes first


def test_a_failed_delivery_returns_its_token_and_leases_expire(store: Store) -> None:
    store.put_policy(Policy(name="p", max_in_flight=1, token_lease_ms=5_000), now_ms=NOW)
    store.create([new(NOW, policy="p") for _ in range(3)], now_ms=NOW)
    [first] = claim(store, store.next_epoch())
    store.acknowledge(epoch=first.epoch, acks=[ack(first, Status.PENDING, next_ms=NOW + 10_000)],
                      now_ms=NOW)
    assert store.in_flight("p", tenant="default", now_ms=NOW) == 0  # the consumer never held it
    [second] = claim(store, store.next_epoch())
    store.acknowledge(epoch=second.epoch, acks=[ack(second, Status.DELIVERED)], now_ms=NOW)
    # Never released: the third waits until the token's lease has run out.
    assert store.next_due_ms(now_ms=NOW + 1_000, lease_ms=60_000) == NOW + 5_000
    assert claim(store, store.next_epoch(), now_ms=NOW + 4_999, until_ms=NOW + 4_999) == []
    [third] = claim(store, store.next_epoch(), now_ms=NOW + 5_000, until_ms=NOW + 5_000)
    assert third.id not in (first.id, second.id)
    [again] = claim(store, store.next_epoch(), now_ms=NOW + 11_000, until_ms=NOW + 11_000)
    assert again.id == first.id and again.attempt == 2


def test_rate_limits_starts_per_second(store: Store) -> None:
    store.put_policy(Policy(name="r", max_in_flight=100, rate=2.0), now_ms=NOW)
    store.create([new(NOW, policy="r") for _ in range(10)], now_ms=NOW)
    assert len(claim(store, store.next_epoch())) == 2  # a burst of one second's worth
    assert claim(store, store.next_epoch(), now_ms=NOW + 100, until_ms=NOW + 100) == []
    assert store.next_due_ms(now_ms=NOW + 100, lease_ms=60_000) == NOW + 500
    assert len(claim(store, store.next_epoch(), now_ms=NOW + 500, until_ms=NOW + 500)) == 1
    assert len(claim(store, store.next_epoch(), now_ms=NOW + 1500, until_ms=NOW + 1500)) == 2


def test_concurrent_claims_share_the_tokens(store: Store) -> None:
    """Many epochs claiming at once (threads, each its own connection) hold at most m."""
    store.put_policy(Policy(name="p", max_in_flight=7), now_ms=NOW)
    store.create([new(NOW, policy="p") for _ in range(100)], now_ms=NOW)
    got: list[int] = []
    lock = threading.Lock()

    def one() -> None:
        rows = claim(store, store.next_epoch())
        with lock:
            got.append(len(rows))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(got) == 7
    assert store.in_flight("p", tenant="default", now_ms=NOW) == 7


def test_a_policy_spread_over_buckets_keeps_exact_tokens_earliest_first(store: Store) -> None:
    """A policy's schedules land in every bucket range, so every task claims some; tasks
    claiming their ranges at once still hold at most m tokens, and the m taken are the
    policy's earliest, whichever range each lies in."""
    store.put_policy(Policy(name="p", max_in_flight=9), now_ms=NOW)
    made = [s for s, _ in store.create([new(NOW - 1_000 + i, policy="p") for i in range(200)],
                                       now_ms=NOW)]
    assert len({store.get(s.id).bucket for s in made}) > BUCKETS // 2
    quarter = BUCKETS // 4
    got: list[str] = []
    lock = threading.Lock()

    def one(lo: int) -> None:
        rows = claim(store, store.next_epoch(), lo=lo, hi=lo + quarter - 1)
        with lock:
            got.extend(r.id for r in rows)

    threads = [threading.Thread(target=one, args=(lo,)) for lo in range(0, BUCKETS, quarter)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == sorted(s.id for s in made[:9])  # the 9 earliest, once each
    assert store.in_flight("p", tenant="default", now_ms=NOW) == 9


def test_a_policy_in_use_cannot_be_deleted(store: Store) -> None:
    store.put_policy(Policy(name="p", max_in_flight=1), now_ms=NOW)
    store.create([new(NOW + 60_000, policy="p")], now_ms=NOW)
    with pytest.raises(ConflictError):
        store.delete_policy("p", tenant="default")
    assert store.get_policy("p", tenant="default").max_in_flight == 1
    with pytest.raises(NotFoundError):
        store.delete_policy("absent", tenant="default")


def test_an_expansion_writes_its_firings_in_due_order(tmp_path: Path) -> None:
    """The schedules of many rules are written in due order, not rule by rule: the messages
    of one firing instant lie together in the table, as one-off schedules created together
    do, so that their claims and acknowledgements touch few pages."""
    from tocsin.stores.sqlite import SQLiteStore

    store = SQLiteStore(tmp_path / "t.db", buckets=BUCKETS)
    for i in range(5):
        store.create_recurring(rec(f"rec-{i}"), now_ms=T0)
    assert expand_all(store, T0) == 5 * 10
    written = [int(r[0]) for r in store._conn.execute(
        "SELECT firing_ms FROM schedules ORDER BY rowid")]
    assert written == sorted(written)
    assert written[:5] == [T0 + MIN] * 5  # the five rules' first firing, together
    store.close()

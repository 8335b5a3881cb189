"""Destinations' wake-up times (schema 16), on both stores: a claim lists only the
destinations whose wake-up time has come, so idle ones cost it nothing; whatever writes a
schedule keeps every destination's wake-up time at or before its earliest PENDING schedule;
and on PostgreSQL a claim raising a wake-up time never passes over a schedule being written
meanwhile."""

from __future__ import annotations

from typing import Any

import psycopg

from tests.support.statements import StatementLog
from tocsin.abc import Store
from tocsin.domain import Status
from tocsin.stores.postgres import PostgresStore
from tocsin.stores.sql import fair
from tocsin.stores.sql.fair import NEAR_MS, NEVER_MS, PEEK_PAGE, Due, due_destinations

from .test_store import BUCKETS, LEASE, NOW, ack, claim, new

_BEHIND = ("SELECT count(*) FROM schedules s LEFT JOIN destinations d "
           "ON d.tenant = s.tenant AND d.channel = s.channel "
           "WHERE s.status = 'PENDING' AND s.policy IS NULL "
           "AND (d.wake_ms IS NULL OR d.wake_ms > s.next_ms)")
"""PENDING schedules whose destination would wake up after them (or never): none, ever."""


def _sql(store: Store, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    d = store._dialect  # type: ignore[attr-defined]
    return store._work(lambda conn: conn.execute(d.q(sql), args).fetchall(),  # type: ignore[attr-defined,no-any-return]
                       write=False)


def _behind(store: Store) -> int:
    return int(_sql(store, _BEHIND)[0][0])


def _wake(store: Store, tenant: str, channel: str = "out") -> int | None:
    rows = _sql(store, "SELECT wake_ms FROM destinations WHERE tenant = ? AND channel = ?",
                (tenant, channel))
    return int(rows[0][0]) if rows else None


def test_a_claim_lists_only_destinations_due(store: Store) -> None:
    store.create([new(NOW + 86_400_000 + i, tenant=f"idle{i}") for i in range(300)],
                 now_ms=NOW)
    store.create([new(NOW - 10, tenant="busy") for _ in range(5)], now_ms=NOW - 1_000)
    d = store._dialect  # type: ignore[attr-defined]
    listed = store._work(lambda conn: due_destinations(conn, d, NOW),  # type: ignore[attr-defined]
                         write=False)
    assert [(x.tenant, x.first_ms) for x in listed] == [("busy", NOW - 10)]
    assert {r.tenant for r in claim(store, store.next_epoch())} == {"busy"}
    assert store.next_due_ms(now_ms=NOW, lease_ms=10**9) == NOW + 86_400_000


def test_a_claim_raises_the_wake_up_time_of_what_it_emptied(store: Store) -> None:
    store.create([new(NOW - 10, tenant="t"), new(NOW + 60_000, tenant="t")], now_ms=NOW - 100)
    assert _wake(store, "t") == NOW - 10
    [row] = claim(store, store.next_epoch())
    assert _wake(store, "t") == NOW + 60_000, "the next claim does not list it until then"
    store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DELIVERED)], now_ms=NOW)
    [(later, _)] = store.create([new(NOW + 30_000, tenant="t")], now_ms=NOW)
    assert _wake(store, "t") == NOW + 30_000
    store.cancel(later.id, now_ms=NOW)
    assert claim(store, store.next_epoch(), until_ms=NOW + 40_000) == []
    assert _wake(store, "t") == NOW + 60_000, "a cancelled schedule's time is given up"


def test_a_claim_leaves_the_wake_up_time_of_a_destination_due_again_at_once(
        store: Store) -> None:
    # At 200 a second every claim raised the wake-up time by 5 ms: a write of the destination
    # each time, where the next claim lists it all the same.
    store.create([new(NOW - 10, tenant=t) for t in ("busy", "slow")], now_ms=NOW - 100)
    store.create([new(NOW + NEAR_MS // 2, tenant="busy"), new(NOW + 500, tenant="slow")],
                 now_ms=NOW - 100)
    assert {r.tenant for r in claim(store, store.next_epoch())} == {"busy", "slow"}
    assert _wake(store, "busy") == NOW - 10, "its next schedule is due within NEAR_MS"
    assert _wake(store, "slow") == NOW + 500
    assert _behind(store) == 0


def test_every_write_keeps_wake_up_times_at_or_before_the_schedules(store: Store) -> None:
    store.create([new(NOW - 100 + i, tenant=f"t{i % 3}", channel=f"c{i % 2}")
                  for i in range(30)], now_ms=NOW - 1_000)
    assert _behind(store) == 0
    rows = claim(store, store.next_epoch(), limit=12)
    store.acknowledge(epoch=rows[0].epoch, now_ms=NOW,
                      acks=[ack(r, Status.PENDING, next_ms=NOW - 5_000) for r in rows[:4]]
                      + [ack(r, Status.DEAD) for r in rows[4:8]])
    assert _behind(store) == 0, "retries moved earlier than their destination's time"
    store.unclaim(epoch=rows[0].epoch, ids=[r.id for r in rows[8:]])
    assert _behind(store) == 0, "handed back"
    store.redrive_where(now_ms=NOW - 50_000)
    assert _behind(store) == 0, "re-driven"
    [(made, _)] = store.create([new(NOW + 90_000, tenant="t9")], now_ms=NOW)
    claim(store, store.next_epoch(), limit=1_000)
    store.reschedule(made.id, now_ms=NOW, due_ms=NOW - 60_000)
    assert _behind(store) == 0, "moved earlier"
    pulled = store.pull(epoch=store.next_epoch(), tenant="t9", channel="out", now_ms=NOW,
                        limit=10)
    assert [r.id for r in pulled] == [made.id]
    assert _behind(store) == 0


def test_a_schedule_written_during_a_claim_is_not_passed_over(postgres_store_url: str) -> None:
    """A claim that empties a destination raises its wake-up time; a schedule of that
    destination inserted meanwhile, not yet committed, is not seen by the claim's read. The
    insert's share lock on the destination makes the claim leave its time alone."""
    store = PostgresStore(postgres_store_url, buckets=16)
    try:
        store.create([new(NOW - 10, tenant="t")], now_ms=NOW - 100)
        with psycopg.connect(postgres_store_url) as other:  # a transaction, open
            other.execute(
                "INSERT INTO schedules (id, tenant, channel, payload, payload_kind, headers, "
                "due_ms, next_ms, bucket, status, created_ms) VALUES ('late', 't', 'out', "
                "'\\x7b7d', 'json', '{}', %s, %s, 0, 'PENDING', %s)",
                (NOW + 50_000, NOW + 50_000, NOW))
            assert [r.tenant for r in claim(store, store.next_epoch())] == ["t"]
            other.commit()
        assert _wake(store, "t") == NOW - 10, "left for a later claim to raise"
        assert store.next_due_ms(now_ms=NOW, lease_ms=10**9) == NOW + 50_000
        assert claim(store, store.next_epoch(), until_ms=NOW) == []
        assert _wake(store, "t") == NOW + 50_000
        assert [r.id for r in claim(store, store.next_epoch(), until_ms=NOW + 50_000)] == ["late"]
        assert _wake(store, "t") == NEVER_MS
    finally:
        store.close()


def test_a_write_from_another_search_path_keeps_the_wake_up_time(postgres_url: str,
                                                                  postgres_store_url: str) -> None:
    """The triggers' functions keep Tocsin's schema: a session whose search_path does not name
    it (a script, a report tool) can still write a schedule."""
    schema = postgres_store_url.rsplit("search_path%3D", 1)[1]
    store = PostgresStore(postgres_store_url, buckets=16)
    try:
        store.open()
        with psycopg.connect(postgres_url, autocommit=True) as other:
            other.execute(
                f'INSERT INTO "{schema}".schedules (id, tenant, channel, payload, payload_kind, '
                "headers, due_ms, next_ms, bucket, status, created_ms) VALUES ('s', 't', 'out', "
                "'\\x7b7d', 'json', '{}', %s, %s, 0, 'PENDING', %s)", (NOW, NOW, NOW))
        assert _wake(store, "t") == NOW
        assert [r.id for r in claim(store, store.next_epoch())] == ["s"]
    finally:
        store.close()


def _peek(store: Store, *, until_ms: int) -> int | None:
    return store.next_claimable_ms(bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=until_ms,
                                   now_ms=NOW, lease_ms=LEASE)


def test_a_look_for_the_earliest_reads_one_page_of_many_destinations_due(
        store: Store, monkeypatch: Any) -> None:
    # A hand-over window's look: 40 destinations due within its horizon, each a schedule.
    store.create([new(NOW + 10 + i, tenant=f"t{i:02d}") for i in range(40)], now_ms=NOW)
    listed: list[Due] = []

    def read(*fields: Any) -> Due:
        listed.append(Due(*fields))
        return listed[-1]

    monkeypatch.setattr(fair, "Due", read)  # each destination the look reads
    assert _peek(store, until_ms=NOW + 1_000) == NOW + 10
    assert len(listed) <= PEEK_PAGE, "the later destinations cannot be earlier"


def test_the_look_goes_on_past_pages_of_destinations_with_nothing_claimable(
        store: Store) -> None:
    # Ten destinations whose due schedule waits behind its key's claimed head (more than a
    # page), then one free destination, due later.
    blocked = [f"b{i}" for i in range(PEEK_PAGE + 2)]
    store.create([new(NOW - 100, tenant=t, ordering_key="k") for t in blocked], now_ms=NOW - 200)
    store.create([new(NOW + 10 + i, tenant=t, ordering_key="k") for i, t in enumerate(blocked)],
                 now_ms=NOW - 200)
    assert {r.tenant for r in claim(store, store.next_epoch())} == set(blocked)
    store.create([new(NOW + 500, tenant="free")], now_ms=NOW)
    assert _peek(store, until_ms=NOW + 1_000) == NOW + 500
    assert _peek(store, until_ms=NOW + 400) is None


def test_a_look_finds_the_next_due_instants_of_every_destination_in_order(
        store: Store) -> None:
    # Two destinations whose instants interleave, one instant held by two schedules, a key's
    # second schedule (not claimable before its head) and one past the horizon.
    store.create([new(NOW + t, tenant="a") for t in (10, 30, 30, 50, 70)], now_ms=NOW)
    store.create([new(NOW + t, tenant="b") for t in (20, 40, 60)], now_ms=NOW)
    store.create([new(NOW + t, tenant="c", ordering_key="k") for t in (45, 46)], now_ms=NOW)
    store.create([new(NOW + 5_000, tenant="d")], now_ms=NOW)

    def times(count: int, until_ms: int = NOW + 1_000) -> list[int]:
        return store.claimable_times(bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=until_ms,
                                     now_ms=NOW, lease_ms=LEASE, count=count)

    assert times(6) == [NOW + t for t in (10, 20, 30, 40, 45, 50)]
    assert times(20) == [NOW + t for t in (10, 20, 30, 40, 45, 50, 60, 70)]
    assert times(3, until_ms=NOW + 25) == [NOW + 10, NOW + 20]
    assert times(1) == [_peek(store, until_ms=NOW + 1_000)]
    assert [r.tenant for r in claim(store, store.next_epoch(), until_ms=NOW + 20)] == ["a", "b"]
    assert times(2) == [NOW + 30, NOW + 40], "what a claim took is no longer claimable"


def test_raising_wake_up_times_finds_each_destination_by_its_key(store: Store) -> None:
    """A claim raises the wake-up times of the destinations it listed, each found by its key:
    beside 2 000 idle destinations, SQLite's plan reads none of them (a membership test of
    the pairs had it read every destination for each claim: half a claim's time beside
    10 000, holding the writer)."""
    store.create([new(NOW + 86_400_000 + i, tenant=f"idle{i}") for i in range(2000)],
                 now_ms=NOW)
    store.create([new(NOW - 10, tenant=f"due{i}") for i in range(4)]
                 + [new(NOW + 60_000, tenant="due0")], now_ms=NOW - 1_000)
    d = store._dialect  # type: ignore[attr-defined]
    sqlite = "sqlite" in type(store).__name__.lower()
    if sqlite:
        store._changed("ANALYZE")  # type: ignore[attr-defined]
    dues = [Due(f"due{i}", "out", NOW - 10, NOW - 10) for i in range(4)]
    recorded: list[tuple[str, tuple[Any, ...]]] = []

    def work(conn: Any) -> None:
        recording = StatementLog(conn)
        for i in range(4):
            conn.execute(d.q("UPDATE schedules SET status = 'CLAIMED' WHERE tenant = ? "
                             "AND next_ms < ?"), (f"due{i}", NOW))
        fair.raise_wakes(recording, d, dues, NOW)
        recorded.extend(recording.statements)
        if sqlite:
            plans = [" / ".join(str(r[-1]) for r in conn.execute(
                "EXPLAIN QUERY PLAN " + sql, args).fetchall()) for sql, args in recorded]
            assert len(plans) == 2, plans  # the stale ones found, then raised
            for plan in plans:
                assert "SEARCH s USING PRIMARY KEY" in plan, plan
                assert "SCAN s" not in plan, plan

    store._work(work)  # type: ignore[attr-defined]
    assert _wake(store, "due0") == NOW + 60_000
    assert [_wake(store, f"due{i}") for i in (1, 2, 3)] == [NEVER_MS] * 3
    assert _wake(store, "idle7") == NOW + 86_400_000 + 7

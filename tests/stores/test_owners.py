"""Several dispatchers on one store: membership from the beats, the buckets shared out between
the members, and ownership fenced in the claim, the pull and the window's peek (on a manual
clock, over both stores)."""

from __future__ import annotations

import time

import pytest

from tocsin.abc import ChannelHold, ClaimedRow, Store
from tocsin.clock import ManualClock
from tocsin.dispatcher.runs import RUN_BEAT_MS, WATCH_MS, look_every_ms
from tocsin.domain import Ack, NewSchedule, Outcome, Status
from tocsin.stores.sql.owners import assignment, holder_run, intersect

from .conftest import BUCKETS, OpenStore

NOW = 1_700_000_000_000
LEASE = 60_000
STALE = 5_000


def join(store: Store, run: str, *, at: int = NOW, ready: bool = True) -> int:
    slot = store.join_run(run, now_ms=at, host="h", pid=1, stale_ms=STALE)
    if ready:
        store.beat_run(run, now_ms=at, ready=True)
    return slot


def look(store: Store, at: int = NOW) -> None:
    store.share_buckets(now_ms=at, stale_ms=STALE)


def owned(store: Store, run: str) -> set[int]:
    return {b for o in store.owners() if o.run == run for b in range(o.lo, o.hi + 1)}


def spread(store: Store, n: int = 96, *, channel: str = "out", due: int = NOW - 1) -> list[str]:
    made = store.create([NewSchedule(channel=channel, payload=b"{}", due_ms=due)
                         for _ in range(n)], now_ms=NOW - 10)
    return [s.id for s, _ in made]


def bucket_of(store: Store, sid: str) -> int:
    return store.get(sid).bucket


def claim(store: Store, epoch: int, *, at: int = NOW, lease_ms: int = LEASE) -> list[ClaimedRow]:
    return store.claim(epoch=epoch, bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=at, now_ms=at,
                       lease_ms=lease_ms, limit=1000, replay=False)


def delivered(row: ClaimedRow, at: int) -> Ack:
    return Ack(schedule_id=row.id, delivery_id=f"{row.id}-{row.attempt}", attempt=row.attempt,
               outcome=Outcome.DELIVERED, error=None, started_ms=at - 5, ended_ms=at,
               due_ms=row.due_ms, status=Status.DELIVERED)


def test_the_assignment_covers_every_bucket_once_in_contiguous_ranges() -> None:
    for buckets in (1, 7, 16, 64):
        for n in range(1, 6):
            members = [f"r{i}" for i in range(n)]
            ranges = assignment(buckets, members)
            covered = [b for lo, hi, _ in ranges for b in range(lo, hi + 1)]
            assert covered == list(range(buckets))
            assert [run for *_, run in ranges] == members[:buckets]
            sizes = [hi - lo + 1 for lo, hi, _ in ranges]
            assert max(sizes) - min(sizes) <= 1
            assert assignment(buckets, members) == ranges  # deterministic
    assert assignment(16, []) == []
    assert intersect([(0, 3), (8, 11)], 2, 9) == [(2, 3), (8, 9)]
    assert intersect([(0, 3)], 4, 9) == []
    assert holder_run("host:12@abc") == "abc" and holder_run("host:12") == ""


def test_members_share_the_buckets_and_each_claims_only_its_own(store: Store) -> None:
    slots = [join(store, run) for run in ("a", "b", "c")]
    assert slots == [0, 1, 2]
    look(store)
    owners = store.owners()
    assert [o.run for o in owners] == ["a", "b", "c"]
    assert len({o.generation for o in owners}) == 1
    ids = spread(store)
    got: dict[str, set[str]] = {}
    for run in ("a", "b", "c"):
        rows = claim(store, store.next_epoch(run=run, now_ms=NOW))
        got[run] = {r.id for r in rows}
        assert {bucket_of(store, r.id) for r in rows} <= owned(store, run)
    assert set().union(*got.values()) == set(ids)  # everything, each by its owner
    assert sum(len(g) for g in got.values()) == len(ids)


def test_an_epoch_without_a_run_is_not_fenced(store: Store) -> None:
    join(store, "a")
    join(store, "b")
    look(store)
    ids = spread(store, 40)
    assert {r.id for r in claim(store, store.next_epoch(now_ms=NOW))} == set(ids)


def test_a_run_that_is_not_a_member_claims_nothing(store: Store) -> None:
    join(store, "a")
    look(store)
    spread(store, 20)
    store.beat_run("stranger", now_ms=NOW)  # beats, but never joined the membership
    assert claim(store, store.next_epoch(run="stranger", now_ms=NOW)) == []


def test_a_joining_run_takes_its_share_only_once_ready(store: Store) -> None:
    join(store, "a")
    look(store)
    assert owned(store, "a") == set(range(BUCKETS))
    join(store, "b", at=NOW + 100, ready=False)  # warming up: its Spark is not started yet
    look(store, NOW + 100)
    assert owned(store, "a") == set(range(BUCKETS))
    before = store.owners()[0]
    store.beat_run("b", now_ms=NOW + 200, ready=True)
    look(store, NOW + 200)
    after = store.owners()
    assert owned(store, "a") | owned(store, "b") == set(range(BUCKETS))
    assert owned(store, "a") and owned(store, "b")
    assert after[0].generation == before.generation + 1
    assert after[0].since_ms == NOW + 200  # a changed range is owned since the change


def test_an_unchanged_assignment_keeps_its_generation_and_since(store: Store) -> None:
    join(store, "a")
    join(store, "b")
    look(store)
    first = store.owners()
    for at in range(NOW, NOW + 3_000, 1_000):
        store.beat_run("a", now_ms=at)
        store.beat_run("b", now_ms=at)
        look(store, at)
    assert store.owners() == first


def test_a_run_that_stops_beating_is_fenced_and_its_claims_go_to_the_new_owner(
        store: Store) -> None:
    clock = ManualClock(NOW)
    join(store, "a")
    join(store, "b")
    look(store)
    ids = spread(store)
    a_epoch = store.next_epoch(run="a", now_ms=NOW)
    held = claim(store, a_epoch)
    assert held and store.run_claims("a") == len(held)
    # "a" freezes (SIGSTOP); "b" goes on beating
    clock.advance(STALE + 1)
    store.beat_run("b", now_ms=clock.now_ms())
    membership = store.share_buckets(now_ms=clock.now_ms(), stale_ms=STALE)
    assert membership.fenced == ["a"] and membership.released == len(held)
    assert owned(store, "b") == set(range(BUCKETS)) and owned(store, "a") == set()
    assert [r.run for r in store.runs()] == ["b"]
    # "a" wakes up: its beat is refused, its claims take nothing, its late verdicts are fenced
    assert store.beat_run("a", now_ms=clock.now_ms()) is False
    assert claim(store, store.next_epoch(run="a", now_ms=clock.now_ms()),
                 at=clock.now_ms()) == []
    taken = claim(store, store.next_epoch(run="b", now_ms=clock.now_ms()), at=clock.now_ms())
    assert {r.id for r in taken} == set(ids)  # its released claims and the rest of its buckets
    again = {r.id: r.attempt for r in taken}
    assert all(again[r.id] == r.attempt for r in held)  # the same attempt: the same delivery id
    assert store.acknowledge(epoch=a_epoch, acks=[delivered(r, clock.now_ms()) for r in held],
                             now_ms=clock.now_ms()) == 0
    assert all(store.get(r.id).status is Status.CLAIMED for r in held)


def test_a_leaving_run_hands_its_buckets_over_at_once_and_its_claims_at_its_end(
        store: Store) -> None:
    join(store, "a")
    join(store, "b")
    look(store)
    spread(store)
    held = claim(store, store.next_epoch(run="a", now_ms=NOW))
    store.leave_run("a", now_ms=NOW + 1, stale_ms=STALE)
    assert owned(store, "b") == set(range(BUCKETS))
    assert store.run_claims("a") == len(held)  # still its own: it sends them meanwhile
    b_rows = claim(store, store.next_epoch(run="b", now_ms=NOW + 2), at=NOW + 2)
    assert not {r.id for r in b_rows} & {r.id for r in held}
    store.end_run("a", now_ms=NOW + 3)
    assert store.run_claims("a") == len(held)  # released, not yet reclaimed
    again = claim(store, store.next_epoch(run="b", now_ms=NOW + 4), at=NOW + 4)
    assert {r.id for r in again} == {r.id for r in held}


def test_a_run_that_owns_every_bucket_alone_looks_once_a_beat(store: Store) -> None:
    """Alone, a run looks at the membership once a beat (nobody to take over from); once it
    shares the buckets, ten times a beat where the store shows a death at once."""
    join(store, "a")
    alone = store.share_buckets(now_ms=NOW, stale_ms=STALE, me="a")
    assert {o.run for o in alone.owners} == {"a"}
    assert look_every_ms(alone, "a", session_locks=True) == RUN_BEAT_MS
    join(store, "b", at=NOW + 1)
    shared = store.share_buckets(now_ms=NOW + 1, stale_ms=STALE, me="a")
    assert {o.run for o in shared.owners} == {"a", "b"}
    assert look_every_ms(shared, "a", session_locks=True) == WATCH_MS
    assert look_every_ms(shared, "a", session_locks=False) == RUN_BEAT_MS


def test_a_slot_is_free_again_once_its_run_is_fenced(store: Store) -> None:
    assert join(store, "a") == 0 and join(store, "b") == 1
    store.end_run("a", now_ms=NOW + 1)
    assert join(store, "c", at=NOW + 2) == 0
    assert join(store, "d", at=NOW + 3) == 2


def test_pull_and_the_peeks_take_only_the_owned_buckets(store: Store) -> None:
    join(store, "a")
    join(store, "b")
    look(store)
    ids = spread(store)
    mine = {i for i in ids if bucket_of(store, i) in owned(store, "a")}
    pulled = store.pull(epoch=store.next_epoch(run="a", now_ms=NOW), tenant="default",
                        channel="out", now_ms=NOW, limit=1000)
    assert {r.id for r in pulled} == mine
    assert store.next_pull_ms(tenant="default", channel="out", until_ms=NOW, run="a") is None
    assert store.next_pull_ms(tenant="default", channel="out", until_ms=NOW, run="b") == NOW - 1
    assert store.next_claimable_ms(bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=NOW,
                                   now_ms=NOW, lease_ms=LEASE, run="a") is None
    assert store.next_claimable_ms(bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=NOW,
                                   now_ms=NOW, lease_ms=LEASE, run="b") == NOW - 1


def test_a_full_lane_holds_its_destination_only_in_its_runs_buckets(store: Store) -> None:
    join(store, "a")
    join(store, "b")
    look(store)
    ids = spread(store)
    store.hold_channel(ChannelHold("default", "out", "busy", NOW, NOW + 10_000, 0, None,
                                   "host:1@a"))
    assert claim(store, store.next_epoch(run="a", now_ms=NOW)) == []  # its puller's to take
    theirs = claim(store, store.next_epoch(run="b", now_ms=NOW))
    assert {r.id for r in theirs} == {i for i in ids if bucket_of(store, i) in owned(store, "b")}
    # a breaker's hold (no run) still passes the destination over everywhere
    spread(store, 20)
    store.hold_channel(ChannelHold("default", "out", "open", NOW, NOW + 10_000, 1, None, ""))
    assert claim(store, store.next_epoch(run="b", now_ms=NOW)) == []


def covering(store: Store, epoch: int, peer: str, *, at: int = NOW) -> list[ClaimedRow]:
    return store.claim(epoch=epoch, bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=at, now_ms=at,
                       lease_ms=LEASE, limit=1000, replay=False, cover=peer)


def test_a_member_covers_for_another_only_in_that_ones_buckets(store: Store) -> None:
    for run in ("a", "b", "c"):
        join(store, run)
    look(store)
    ids = spread(store)
    b_epoch = store.next_epoch(run="b", now_ms=NOW)
    taken = covering(store, b_epoch, "a")  # "a" froze: "b" covers for it
    assert taken and {bucket_of(store, r.id) for r in taken} <= owned(store, "a")
    assert {r.id for r in taken} == {i for i in ids if bucket_of(store, i) in owned(store, "a")}
    assert all(store.get(r.id).status is Status.CLAIMED for r in taken)
    # nobody's ownership moved; the covered rows are acknowledged under the cover's epoch
    assert owned(store, "a") and store.run_claims("b") == len(taken)
    assert store.acknowledge(epoch=b_epoch, acks=[delivered(r, NOW) for r in taken],
                             now_ms=NOW) == len(taken)
    # what "a" then claims is the rest of its own buckets only: nothing of it left
    assert claim(store, store.next_epoch(run="a", now_ms=NOW)) == []
    assert covering(store, b_epoch, "b") == []  # a run does not cover for itself


def test_a_fenced_run_covers_for_nobody_and_the_cover_respects_the_peers_holds(
        store: Store) -> None:
    join(store, "a")
    join(store, "b")
    look(store)
    spread(store)
    # a run that is not a member (fenced, or never joined) claims nothing for another
    store.beat_run("stranger", now_ms=NOW)
    assert covering(store, store.next_epoch(run="stranger", now_ms=NOW), "a") == []
    # the peer's full lane holds its destination in its buckets: its puller's, not the cover's
    store.hold_channel(ChannelHold("default", "out", "busy", NOW, NOW + 10_000, 0, None,
                                   "host:1@a"))
    assert covering(store, store.next_epoch(run="b", now_ms=NOW), "a") == []
    assert store.next_claimable_ms(bucket_lo=0, bucket_hi=BUCKETS - 1, until_ms=NOW,
                                   now_ms=NOW, lease_ms=NOW - 1, run="a") is None
    store.unhold_channel("default", "out")
    got = covering(store, store.next_epoch(run="b", now_ms=NOW), "a")
    assert got and {bucket_of(store, r.id) for r in got} <= owned(store, "a")


def test_a_dead_process_is_fenced_at_once_where_its_lock_shows_it(
        open_backend: OpenStore, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    if not store_url.startswith("postgres"):
        pytest.skip("SQLite has no session locks: the beats alone tell")
    import tocsin.stores.postgres as pg

    monkeypatch.setattr(pg, "LOCKS_TRUSTED_AFTER_S", 0)  # the test server may be young
    watcher, dying = open_backend(), open_backend()
    assert dying.hold_run_lock(4242)
    dying.join_run("dying", now_ms=NOW, host="h", pid=2, stale_ms=STALE, lock_id=4242)
    dying.beat_run("dying", now_ms=NOW, ready=True)
    join(watcher, "alive")
    look(watcher)
    assert owned(watcher, "dying")
    dying.close()  # what kill -9 does to its sessions
    for _ in range(50):  # the server ends the session as soon as it sees the socket closed
        membership = watcher.share_buckets(now_ms=NOW + 1, stale_ms=STALE, me="alive")
        if membership.fenced:
            break
        time.sleep(0.02)
    assert membership.fenced == ["dying"]  # long before its beats would have told (5 s)
    assert owned(watcher, "alive") == set(range(BUCKETS))


def _frozen_and_alive(open_backend: OpenStore, store_url: str) -> Store:
    """A PostgreSQL store (SQLite: the test is skipped) whose runs ``frozen`` and ``alive``
    share the buckets, with 40 schedules due."""
    if not store_url.startswith("postgres"):
        pytest.skip("SQLite has one writer and no sessions to end")
    store = open_backend()
    join(store, "frozen")
    join(store, "alive")
    look(store)
    spread(store, 40)
    return store


def test_a_frozen_run_holding_its_locks_is_cut_off_and_fenced(
        open_backend: OpenStore, store_url: str) -> None:
    import psycopg

    from tocsin.stores.postgres import run_session_name

    store = _frozen_and_alive(open_backend, store_url)
    # frozen in the middle of a claim: its transaction holds a share lock on its owners' rows
    # and the rows it was claiming, and will never end by itself
    frozen = psycopg.connect(store_url, application_name=run_session_name("frozen"))
    frozen.execute("SELECT * FROM bucket_owners WHERE run = 'frozen' FOR SHARE")
    frozen.execute("UPDATE schedules SET claimed_ms = 1 WHERE status = 'PENDING'")
    try:
        store.beat_run("alive", now_ms=NOW + STALE + 1)
        membership = store.share_buckets(now_ms=NOW + STALE + 1, stale_ms=STALE, me="alive")
        assert membership.fenced == ["frozen"]
        assert owned(store, "alive") == set(range(BUCKETS))
        assert frozen.closed or frozen.pgconn.status != psycopg.pq.ConnStatus.OK or _dead(frozen)
    finally:
        frozen.close()


def test_a_frozen_runs_own_store_sessions_are_named_for_it_and_cut_off(
        open_backend: OpenStore, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The frozen run above, as a dispatcher is: its store's pooled session (named through
    PGAPPNAME, as ``tocsin dispatcher`` sets it) stopped in the middle of a claim. Its pool
    had named every session ``tocsin``, so the fence found none to end and waited for the
    frozen process's locks for as long as it stayed frozen."""
    import threading

    from tocsin.stores.postgres import run_session_name

    store = _frozen_and_alive(open_backend, store_url)
    monkeypatch.setenv("PGAPPNAME", run_session_name("frozen"))
    frozen_store = open_backend()
    monkeypatch.delenv("PGAPPNAME")
    holding, thawed = threading.Event(), threading.Event()
    ended: list[BaseException] = []

    def freeze(conn: object) -> None:
        conn.execute("SELECT * FROM bucket_owners WHERE run = 'frozen' FOR SHARE")  # type: ignore[attr-defined]
        conn.execute("UPDATE schedules SET claimed_ms = 1 WHERE status = 'PENDING'")  # type: ignore[attr-defined]
        holding.set()
        thawed.wait(30)
        conn.execute("SELECT 1")  # type: ignore[attr-defined]

    def frozen_claim() -> None:
        try:
            frozen_store._run(freeze)  # type: ignore[attr-defined]
        except BaseException as exc:  # what ended it is the point
            ended.append(exc)

    thread = threading.Thread(target=frozen_claim)
    thread.start()
    try:
        assert holding.wait(10)
        store.beat_run("alive", now_ms=NOW + STALE + 1)
        membership = store.share_buckets(now_ms=NOW + STALE + 1, stale_ms=STALE, me="alive")
        assert membership.fenced == ["frozen"]
        assert owned(store, "alive") == set(range(BUCKETS))
    finally:
        thawed.set()
        thread.join(30)
    assert ended, "the frozen run's transaction went on after its fence"  # its session ended


def _dead(conn: object) -> bool:
    import psycopg

    try:
        conn.execute("SELECT 1")  # type: ignore[attr-defined]
    except psycopg.Error:
        return True
    return False

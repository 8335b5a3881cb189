"""The :class:`~tocsin.abc.Store` contract, on every backend (see ``conftest.store``)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import threading
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from typing import Any

import pytest

from tocsin.abc import ClaimedRow, Store
from tocsin.domain import Ack, ChannelKind, ChannelSpec, NewSchedule, Outcome, ScheduleOrder, Status
from tocsin.domain.schedule import PayloadKind
from tocsin.errors import ConflictError, NotFoundError, ValidationError
from tocsin.stores import open_store

from .conftest import BUCKETS

NOW = 1_700_000_000_000
LEASE = 60_000


def new(due_ms: int = NOW, **fields: Any) -> NewSchedule:
    fields.setdefault("channel", "out")
    fields.setdefault("payload", b'{"n":1}')
    return NewSchedule(due_ms=due_ms, **fields)


def claim(store: Store, epoch: int, *, until_ms: int = NOW, now_ms: int = NOW,
          limit: int = 1000, lo: int = 0, hi: int = BUCKETS - 1) -> list[ClaimedRow]:
    return store.claim(epoch=epoch, bucket_lo=lo, bucket_hi=hi, until_ms=until_ms, now_ms=now_ms,
                       lease_ms=LEASE, limit=limit)


def ack(row: ClaimedRow, status: Status, *, ended_ms: int = NOW + 10, **fields: Any) -> Ack:
    outcome = {Status.DELIVERED: Outcome.DELIVERED, Status.PENDING: Outcome.RETRY,
               Status.DEAD: Outcome.REJECTED}[status]
    return Ack(schedule_id=row.id, delivery_id=f"{row.id}-{row.attempt}", attempt=row.attempt,
               outcome=fields.pop("outcome", outcome), error=fields.pop("error", None),
               started_ms=ended_ms - 5, ended_ms=ended_ms, due_ms=row.due_ms, status=status,
               **fields)


def ids(rows: list[ClaimedRow]) -> set[str]:
    return {r.id for r in rows}


# -- create / get / list ---------------------------------------------------------------------


def test_create_one_and_get(store: Store) -> None:
    item = new(NOW + 5, payload=b"hi", payload_kind=PayloadKind.TEXT, headers={"a": "b"},
               tenant="t1", ordering_key="order-1")
    [(made, created)] = store.create([item], now_ms=NOW)
    assert created
    assert made.status is Status.PENDING and made.attempts == 0
    assert (made.channel, made.payload, made.payload_kind, made.headers) == (
        "out", b"hi", PayloadKind.TEXT, {"a": "b"})
    assert (made.due_ms, made.next_ms, made.created_ms) == (NOW + 5, NOW + 5, NOW)
    assert (made.tenant, made.ordering_key) == ("t1", "order-1")
    assert 0 <= made.bucket < BUCKETS
    assert store.get(made.id) == made


def test_binary_payload_round_trips(store: Store) -> None:
    payload = bytes(range(256))
    [(made, _)] = store.create([new(payload=payload, payload_kind=PayloadKind.BINARY)],
                               now_ms=NOW)
    assert store.get(made.id).payload == payload


def test_get_unknown_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.get("01ARZ3NDEKTSV4RRFFQ69G5FAV")


def test_create_batch(store: Store) -> None:
    made = store.create([new(NOW + i) for i in range(50)], now_ms=NOW)
    assert [s.due_ms for s, _ in made] == [NOW + i for i in range(50)]
    assert all(created for _, created in made)
    assert len({s.id for s, _ in made}) == 50
    assert store.counts()[Status.PENDING] == 50


def test_idempotent_key_same_request_returns_existing(store: Store) -> None:
    [(first, created)] = store.create([new(key="k1")], now_ms=NOW)
    assert created
    [(again, created)] = store.create([new(key="k1")], now_ms=NOW + 1000)
    assert not created
    assert again == first
    assert store.counts()[Status.PENDING] == 1


def test_key_is_per_tenant(store: Store) -> None:
    made = store.create([new(key="k", tenant="a"), new(key="k", tenant="b")], now_ms=NOW)
    assert [created for _, created in made] == [True, True]


def test_idempotent_key_different_request_conflicts(store: Store) -> None:
    [(first, _)] = store.create([new(key="k1")], now_ms=NOW)
    with pytest.raises(ConflictError) as info:
        store.create([new(NOW + 1, key="k1")], now_ms=NOW)
    assert first.id in str(info.value) and info.value.ident == first.id
    assert store.list_schedules() == [first]


def test_batch_is_all_or_nothing(store: Store) -> None:
    store.create([new(key="taken")], now_ms=NOW)
    batch = [new(NOW + 1), new(NOW + 2, key="fresh"), new(NOW + 3, key="taken"), new(NOW + 4)]
    with pytest.raises(ConflictError):
        store.create(batch, now_ms=NOW)
    assert [s.key for s in store.list_schedules()] == ["taken"]
    # the same batch without the conflict goes through whole
    assert len(store.create(batch[:2] + batch[3:], now_ms=NOW)) == 3


def test_same_key_twice_in_one_batch(store: Store) -> None:
    (one, created1), (two, created2) = store.create([new(key="k"), new(key="k")], now_ms=NOW)
    assert (created1, created2) == (True, False)
    assert one == two


def test_racing_creates_of_one_key(store: Store) -> None:
    start = threading.Barrier(4)

    def create(_: int) -> tuple[str, bool]:
        start.wait()
        [(made, created)] = store.create([new(key="race")], now_ms=NOW)
        return made.id, created

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(create, range(4)))
    assert len({i for i, _ in results}) == 1
    assert sorted(created for _, created in results) == [False, False, False, True]


def test_list_filters_and_cursor(store: Store) -> None:
    made = [s for s, _ in store.create(
        [new(NOW + i, channel="a" if i % 2 else "b") for i in range(30)], now_ms=NOW)]
    store.cancel(made[0].id, now_ms=NOW)
    by_id = sorted(made, key=lambda s: s.id)
    assert [s.id for s in store.list_schedules(limit=1000)] == [s.id for s in by_id]
    assert {s.id for s in store.list_schedules(channel="a")} == {
        s.id for s in made if s.channel == "a"}
    assert [s.id for s in store.list_schedules(status=Status.CANCELLED)] == [made[0].id]
    assert len(store.list_schedules(status=Status.PENDING)) == 29
    window = store.list_schedules(due_from_ms=NOW + 10, due_to_ms=NOW + 20)
    assert sorted(s.due_ms for s in window) == list(range(NOW + 10, NOW + 20))
    assert {s.id for s in store.list_schedules(channel="b", due_from_ms=NOW + 10,
                                               due_to_ms=NOW + 20)} == {
        s.id for s in made if s.channel == "b" and NOW + 10 <= s.due_ms < NOW + 20}
    pages, cursor = [], None
    while page := store.list_schedules(after_id=cursor, limit=7):
        pages.append(page)
        cursor = page[-1].id
    assert [len(p) for p in pages] == [7, 7, 7, 7, 2]
    assert [s.id for p in pages for s in p] == [s.id for s in by_id]


def test_list_by_due_time_or_newest_activity(store: Store) -> None:
    """The dashboard's sorts: tonight's pending above a minute ago's deliveries (due time,
    latest first), or what happened last first (delivered, else claimed, else created)."""
    [(delivered, _)] = store.create([new(NOW - 60_000)], now_ms=NOW - 120_000)
    [(tonight, _)] = store.create([new(NOW + 8 * 3600_000)], now_ms=NOW - 90_000)
    [(older, _)] = store.create([new(NOW - 3600_000)], now_ms=NOW - 7200_000)
    [row] = [r for r in store.claim(epoch=store.next_epoch(), bucket_lo=0,
                                    bucket_hi=BUCKETS - 1, until_ms=NOW - 60_000, now_ms=NOW,
                                    lease_ms=60_000, limit=10) if r.id == delivered.id]
    store.acknowledge(epoch=row.epoch, now_ms=NOW, acks=[Ack(
        schedule_id=delivered.id, delivery_id=f"{delivered.id}-1", attempt=1,
        outcome=Outcome.DELIVERED, error=None, started_ms=NOW, ended_ms=NOW,
        due_ms=delivered.due_ms, status=Status.DELIVERED)])
    ids = {delivered.id: "delivered", tonight.id: "tonight", older.id: "older"}

    def listed(order: ScheduleOrder) -> list[str]:
        return [ids[s.id] for s in store.list_schedules(order=order) if s.id in ids]

    assert listed(ScheduleOrder.DUE) == ["tonight", "delivered", "older"]
    # the claim took "older" too (due before it): claimed at NOW, after "tonight" was created
    assert listed(ScheduleOrder.ACTIVITY) == ["delivered", "older", "tonight"]
    assert listed(ScheduleOrder.ID) == ["older", "delivered", "tonight"]  # by creation
    with pytest.raises(ValidationError, match="id order"):
        store.list_schedules(after_id=older.id, order=ScheduleOrder.DUE)


# -- cancel ----------------------------------------------------------------------------------


def test_cancel_pending(store: Store) -> None:
    [(made, _)] = store.create([new(NOW + 100)], now_ms=NOW)
    cancelled = store.cancel(made.id, now_ms=NOW + 1)
    assert cancelled.status is Status.CANCELLED
    assert store.get(made.id).status is Status.CANCELLED
    assert claim(store, store.next_epoch(), until_ms=NOW + 1000) == []
    with pytest.raises(ConflictError, match="CANCELLED") as info:
        store.cancel(made.id, now_ms=NOW + 2)
    assert info.value.status == "CANCELLED"


def test_cancel_too_late(store: Store) -> None:
    made = [s for s, _ in store.create([new(), new()], now_ms=NOW)]
    epoch = store.next_epoch()
    rows = claim(store, epoch)
    with pytest.raises(ConflictError, match="CLAIMED") as info:
        store.cancel(made[0].id, now_ms=NOW)
    assert info.value.status == "CLAIMED" and info.value.ident == made[0].id
    store.acknowledge(epoch=epoch, acks=[ack(r, Status.DELIVERED) for r in rows], now_ms=NOW + 20)
    with pytest.raises(ConflictError, match="DELIVERED") as info:
        store.cancel(made[1].id, now_ms=NOW)
    assert info.value.status == "DELIVERED"


def test_cancel_unknown(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.cancel("01ARZ3NDEKTSV4RRFFQ69G5FAV", now_ms=NOW)


def test_cancel_races_claim_one_winner(store: Store) -> None:
    made = [s for s, _ in store.create([new() for _ in range(40)], now_ms=NOW)]
    cancelled: list[str] = []

    def cancel_all() -> None:
        for s in made:
            with contextlib.suppress(ConflictError):
                cancelled.append(store.cancel(s.id, now_ms=NOW).id)

    with ThreadPoolExecutor(2) as pool:
        cancels = pool.submit(cancel_all)
        claims = pool.submit(lambda: [r.id for r in claim(store, store.next_epoch())])
        claimed = claims.result()
        cancels.result()
    assert set(cancelled).isdisjoint(claimed)
    assert set(cancelled) | set(claimed) == {s.id for s in made}


# -- channels --------------------------------------------------------------------------------


def test_channels(store: Store) -> None:
    assert store.list_channels() == []
    spec = ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": "/tmp/x", "n": 1})
    assert store.put_channel(spec) == spec
    assert store.get_channel("out", tenant="default") == spec
    other = ChannelSpec(name="dlq", kind=ChannelKind.RECORDING)
    store.put_channel(other)
    assert store.list_channels() == [other, spec]
    replaced = ChannelSpec(name="out", kind=ChannelKind.WEBHOOK, config={"url": "http://x"})
    store.put_channel(replaced)
    assert store.get_channel("out", tenant="default") == replaced
    store.delete_channel("out", tenant="default")
    assert store.list_channels() == [other]
    with pytest.raises(NotFoundError):
        store.get_channel("out", tenant="default")
    with pytest.raises(NotFoundError):
        store.delete_channel("out", tenant="default")


def test_the_channels_version_changes_with_every_channel_and_tenant_change(store: Store) -> None:
    from tocsin.domain import Tenant

    seen = [store.channels_version()]
    spec = ChannelSpec(name="out", kind=ChannelKind.RECORDING)
    for change in (lambda: store.put_channel(spec), lambda: store.put_channel(spec),
                   lambda: store.put_tenant(Tenant("default", weight=2), now_ms=1),
                   lambda: store.delete_channel("out", tenant="default")):
        change()
        seen.append(store.channels_version())
    assert len(set(seen)) == len(seen), seen
    with pytest.raises(NotFoundError):  # nothing deleted: nothing changed
        store.delete_channel("out", tenant="default")
    store.create([NewSchedule(channel="out", payload=b"{}", due_ms=5)], now_ms=1)
    assert store.channels_version() == seen[-1]


# -- epochs and due times --------------------------------------------------------------------


def test_next_epoch_increases(store: Store) -> None:
    epochs = [store.next_epoch() for _ in range(5)]
    assert epochs == sorted(set(epochs)) and epochs[0] >= 1


def test_next_epoch_from_threads_is_unique(store: Store) -> None:
    with ThreadPoolExecutor(8) as pool:
        epochs = list(pool.map(lambda _: store.next_epoch(), range(200)))
    assert len(set(epochs)) == 200
    assert store.next_epoch() > max(epochs)


def _epochs_in_child(url: str, n: int) -> list[int]:
    store = open_store(url, buckets=BUCKETS)
    try:
        return [store.next_epoch() for _ in range(n)]
    finally:
        store.close()


def test_next_epoch_from_processes_is_unique(store: Store, store_url: str) -> None:
    before = store.next_epoch()
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        runs = list(pool.map(_epochs_in_child, [store_url] * 3, [50] * 3))
    for run in runs:
        assert run == sorted(run)
    every = [e for run in runs for e in run]
    assert len(set(every)) == 150 and min(every) > before
    assert store.next_epoch() > max(every)


def test_next_due_ms(store: Store) -> None:
    assert store.next_due_ms(now_ms=NOW, lease_ms=LEASE) is None
    store.create([new(NOW + 500), new(NOW + 100), new(NOW + 900)], now_ms=NOW)
    assert store.next_due_ms(now_ms=NOW, lease_ms=LEASE) == NOW + 100
    claim(store, store.next_epoch(), until_ms=NOW + 100, now_ms=NOW + 150)
    # the claimed row counts from its lease's end; the next PENDING row is earlier
    assert store.next_due_ms(now_ms=NOW + 150, lease_ms=LEASE) == NOW + 500
    claim(store, store.next_epoch(), until_ms=NOW + 1000, now_ms=NOW + 1000)
    assert store.next_due_ms(now_ms=NOW + 1000, lease_ms=LEASE) == NOW + 150 + LEASE


# -- claims ----------------------------------------------------------------------------------


def test_claim_takes_only_due_pending(store: Store) -> None:
    due = [s for s, _ in store.create([new(NOW - 10), new(NOW)], now_ms=NOW - 100)]
    store.create([new(NOW + 1)], now_ms=NOW - 100)
    [(cancelled, _)] = store.create([new(NOW - 5)], now_ms=NOW - 100)
    store.cancel(cancelled.id, now_ms=NOW - 50)
    epoch = store.next_epoch()
    rows = claim(store, epoch)
    assert ids(rows) == {s.id for s in due}
    assert all(r.epoch == epoch and r.attempt == 1 for r in rows)
    row = next(r for r in rows if r.id == due[0].id)
    assert (row.channel, row.payload, row.payload_kind, row.headers, row.due_ms) == (
        "out", b'{"n":1}', "json", "{}", NOW - 10)
    stored = store.get(due[0].id)
    assert (stored.status, stored.claim_epoch, stored.claimed_ms) == (Status.CLAIMED, epoch, NOW)
    assert claim(store, store.next_epoch()) == []


def test_claim_respects_bucket_range(store: Store) -> None:
    made = [s for s, _ in store.create([new() for _ in range(64)], now_ms=NOW)]
    epoch = store.next_epoch()
    low = claim(store, epoch, hi=BUCKETS // 2 - 1)
    high = claim(store, epoch, lo=BUCKETS // 2)
    assert {r.id for r in low} == {s.id for s in made if s.bucket < BUCKETS // 2}
    assert {r.id for r in high} == {s.id for s in made if s.bucket >= BUCKETS // 2}


def test_claim_has_no_lower_bound(store: Store) -> None:
    """DESIGN.md §3: a row committed after a scan passed its due time still fires."""
    store.create([new(NOW - 1000)], now_ms=NOW - 2000)
    assert len(claim(store, store.next_epoch(), until_ms=NOW, now_ms=NOW)) == 1
    # committed late: due before the previous claim's `until`
    [(late, _)] = store.create([new(NOW - 500)], now_ms=NOW + 100)
    rows = claim(store, store.next_epoch(), until_ms=NOW + 200, now_ms=NOW + 200)
    assert [r.id for r in rows] == [late.id]


def test_claim_limit_takes_earliest_first(store: Store) -> None:
    made = [s for s, _ in store.create([new(NOW - i) for i in range(20)], now_ms=NOW - 100)]
    earliest = sorted(made, key=lambda s: s.due_ms)
    first = claim(store, store.next_epoch(), limit=5)
    assert [r.id for r in first] == [s.id for s in earliest[:5]]
    second = claim(store, store.next_epoch(), limit=5)
    assert [r.id for r in second] == [s.id for s in earliest[5:10]]


def test_replay_returns_same_rows_and_claims_nothing_new(store: Store) -> None:
    store.create([new(NOW - i) for i in range(5)], now_ms=NOW - 100)
    epoch = store.next_epoch()
    first = claim(store, epoch, limit=3)
    store.create([new(NOW - 50)], now_ms=NOW)  # due, and earlier than every claimed row
    replay = claim(store, epoch, limit=3, now_ms=NOW + 5000)
    assert sorted(replay) == sorted(first)
    assert store.counts()[Status.CLAIMED] == 3
    assert store.counts()[Status.PENDING] == 3
    # once part of it is acknowledged, a replay returns what is still claimed
    store.acknowledge(epoch=epoch, acks=[ack(first[0], Status.DELIVERED)], now_ms=NOW + 10)
    assert ids(claim(store, epoch, limit=3)) == ids(first[1:])
    # the same epoch on another range is a claim, not a replay
    pending = store.list_schedules(status=Status.PENDING)
    other = claim(store, epoch, lo=0, hi=BUCKETS // 2)
    assert ids(other) == {s.id for s in pending if s.bucket <= BUCKETS // 2}


def test_racing_replays_agree(store: Store) -> None:
    store.create([new(NOW - i) for i in range(30)], now_ms=NOW - 100)
    epoch = store.next_epoch()
    start = threading.Barrier(3)

    def run(_: int) -> list[ClaimedRow]:
        start.wait()
        return claim(store, epoch, limit=20)

    with ThreadPoolExecutor(3) as pool:
        results = list(pool.map(run, range(3)))
    assert len(results[0]) == 20
    assert all(sorted(r) == sorted(results[0]) for r in results)
    assert store.counts()[Status.CLAIMED] == 20


def test_empty_claim_is_replayed_empty(store: Store) -> None:
    epoch = store.next_epoch()
    assert claim(store, epoch) == []
    store.create([new(NOW - 1)], now_ms=NOW)
    assert claim(store, epoch) == []
    assert len(claim(store, store.next_epoch())) == 1


def test_expired_lease_is_reclaimed_with_same_attempt(store: Store) -> None:
    store.create([new(NOW - 10), new(NOW - 5)], now_ms=NOW - 100)
    old = store.next_epoch()
    first = claim(store, old)
    assert [r.attempt for r in first] == [1, 1]
    # still within the lease: nothing to take
    assert claim(store, store.next_epoch(), now_ms=NOW + LEASE - 1) == []
    new_epoch = store.next_epoch()
    later = NOW + LEASE + 1
    again = claim(store, new_epoch, now_ms=later)
    assert ids(again) == ids(first)
    assert all(r.attempt == 1 and r.epoch == new_epoch for r in again)
    stored = store.get(first[0].id)
    assert (stored.status, stored.claim_epoch, stored.claimed_ms) == (
        Status.CLAIMED, new_epoch, later)


def test_concurrent_claims_are_disjoint_and_complete(store: Store) -> None:
    made = {s.id for s, _ in store.create([new(NOW - i % 100) for i in range(600)],
                                          now_ms=NOW - 200)}
    start = threading.Barrier(4)

    def worker(_: int) -> list[str]:
        start.wait()
        taken: list[str] = []
        while rows := claim(store, store.next_epoch(), limit=25):
            taken += [r.id for r in rows]
        return taken

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(worker, range(4)))
    every = [i for taken in results for i in taken]
    assert len(every) == len(set(every)) == 600
    assert set(every) == made


def _claim_in_child(url: str, n_epochs: int) -> list[str]:
    store = open_store(url, buckets=BUCKETS)
    try:
        taken: list[str] = []
        for _ in range(n_epochs):
            taken += [r.id for r in claim(store, store.next_epoch(), limit=20)]
        return taken
    finally:
        store.close()


def test_claims_from_processes_are_disjoint_and_complete(store: Store, store_url: str) -> None:
    made = {s.id for s, _ in store.create([new(NOW - i % 50) for i in range(300)],
                                          now_ms=NOW - 100)}
    with ProcessPoolExecutor(3, mp_context=multiprocessing.get_context("spawn")) as pool:
        results = list(pool.map(_claim_in_child, [store_url] * 3, [10] * 3))
    every = [i for taken in results for i in taken]
    assert len(every) == len(set(every))
    rest = _claim_in_child(store_url, 30)
    assert set(every) | set(rest) == made and len(every) + len(rest) == 300


# -- acknowledge -----------------------------------------------------------------------------


def test_acknowledge_delivered_retry_dead(store: Store) -> None:
    [(a, _), (b, _), (c, _), (d, _)] = store.create(
        [new(NOW - 4, headers={"h": "1"}), new(NOW - 3), new(NOW - 2, payload=b'{"x":2}'),
         new(NOW - 1)], now_ms=NOW - 100)
    epoch = store.next_epoch()
    rows = {r.id: r for r in claim(store, epoch)}
    acks = [
        ack(rows[a.id], Status.DELIVERED),
        ack(rows[b.id], Status.PENDING, next_ms=NOW + 1000, error="timeout"),
        ack(rows[c.id], Status.DEAD, error="bad request", dead_letter="dlq"),
        ack(rows[d.id], Status.DEAD, error="gone"),
    ]
    assert store.acknowledge(epoch=epoch, acks=acks, now_ms=NOW + 20) == 4

    delivered = store.get(a.id)
    assert (delivered.status, delivered.attempts, delivered.delivered_ms) == (
        Status.DELIVERED, 1, NOW + 20)
    retry = store.get(b.id)
    assert (retry.status, retry.attempts, retry.next_ms, retry.last_error, retry.claim_epoch) == (
        Status.PENDING, 1, NOW + 1000, "timeout", None)
    dead = store.get(c.id)
    assert (dead.status, dead.attempts, dead.last_error) == (Status.DEAD, 1, "bad request")
    assert store.get(d.id).status is Status.DEAD

    [copy] = store.list_schedules(channel="dlq")
    assert (copy.status, copy.payload, copy.due_ms, copy.tenant) == (
        Status.PENDING, b'{"x":2}', NOW + 20, "default")
    assert copy.headers == {"Tocsin-Dead-Letter-Of": c.id, "Tocsin-Error": "bad request"}
    assert store.counts() == {Status.PENDING: 2, Status.CLAIMED: 0, Status.DELIVERED: 1,
                              Status.CANCELLED: 0, Status.DEAD: 2, Status.EXPIRED: 0}

    # the dead-letter copy is due now; the retry comes back at its next time, as attempt 2
    [letter] = claim(store, store.next_epoch(), until_ms=NOW + 999, now_ms=NOW + 20)
    assert (letter.id, letter.channel, letter.attempt) == (copy.id, "dlq", 1)
    [again] = claim(store, store.next_epoch(), until_ms=NOW + 1000, now_ms=NOW + 1000)
    assert (again.id, again.attempt) == (b.id, 2)


def test_acknowledge_is_fenced_by_epoch(store: Store) -> None:
    [(made, _)] = store.create([new()], now_ms=NOW)
    old = store.next_epoch()
    [first] = claim(store, old)
    newer = store.next_epoch()
    [second] = claim(store, newer, now_ms=NOW + LEASE + 1)
    assert first.attempt == second.attempt == 1
    # the superseded epoch's verdicts change nothing
    for status in (Status.DELIVERED, Status.PENDING, Status.DEAD):
        extra = {"next_ms": NOW} if status is Status.PENDING else {}
        assert store.acknowledge(epoch=old, acks=[ack(first, status, **extra)],
                                 now_ms=NOW + LEASE + 2) == 0
    stored = store.get(made.id)
    assert (stored.status, stored.claim_epoch, stored.attempts) == (Status.CLAIMED, newer, 0)
    assert store.acknowledge(epoch=newer, acks=[ack(second, Status.DELIVERED)],
                             now_ms=NOW + LEASE + 3) == 1
    assert store.get(made.id).status is Status.DELIVERED
    # acknowledging twice applies once
    assert store.acknowledge(epoch=newer, acks=[ack(second, Status.DELIVERED)],
                             now_ms=NOW + LEASE + 4) == 0
    assert store.get(made.id).attempts == 1


def test_acknowledgements_add_to_the_counters_fenced_ones_too(store: Store) -> None:
    """Delivered, retried and dead verdicts add to the delivery counters by outcome, their
    lateness to the lateness counters, and verdicts the fence refused to ``fenced``: the same
    on both stores, through each store's own path (PostgreSQL: one statement for deliveries)."""
    from tocsin.stores.sql.metrics import FENCED

    made = [s for s, _ in store.create([new(NOW - 40 + i) for i in range(6)], now_ms=NOW - 50)]
    old = store.next_epoch()
    first = {r.id: r for r in claim(store, old)}
    newer = store.next_epoch()
    taken = {r.id: r for r in claim(store, newer, now_ms=NOW + LEASE + 1, limit=2)}
    mine = [first[s.id] for s in made if s.id not in taken]
    assert len(mine) == 4
    delivered = [ack(r, Status.DELIVERED, ended_ms=NOW + 60) for r in mine[:2]]
    delivered += [ack(first[i], Status.DELIVERED) for i in taken]  # fenced: taken since
    assert store.acknowledge(epoch=old, acks=delivered, now_ms=NOW + 70) == 2
    assert store.acknowledge(epoch=old, acks=[
        ack(mine[2], Status.PENDING, next_ms=NOW + 5_000, error="503"),
        ack(mine[3], Status.DEAD, error="gone")], now_ms=NOW + 80) == 2
    totals = store.counter_totals()
    by_outcome = {json.loads(labels).get("outcome"): n for (name, labels), n in totals.items()
                  if name == "deliveries"}
    assert by_outcome == {"delivered": 4, "retried": 1, "dead": 1}
    assert totals[(FENCED, "{}")] == 2
    assert sum(n for (name, _), n in totals.items() if name == "lateness_le") == 4
    assert [d.delivery_id for s in made for d in store.deliveries(s.id)].count(
        f"{mine[0].id}-1") == 1


def test_acknowledge_nothing(store: Store) -> None:
    assert store.acknowledge(epoch=store.next_epoch(), acks=[], now_ms=NOW) == 0


def test_deliveries_log(store: Store) -> None:
    [(made, _)] = store.create([new(NOW - 10)], now_ms=NOW - 100)
    assert store.deliveries(made.id) == []
    e1 = store.next_epoch()
    [row] = claim(store, e1)
    store.acknowledge(epoch=e1, acks=[ack(row, Status.PENDING, next_ms=NOW + 50, error="503",
                                          ended_ms=NOW + 10)], now_ms=NOW + 10)
    e2 = store.next_epoch()
    [row] = claim(store, e2, until_ms=NOW + 50, now_ms=NOW + 50)
    store.acknowledge(epoch=e2, acks=[ack(row, Status.DELIVERED, ended_ms=NOW + 60)],
                      now_ms=NOW + 60)
    first, second = store.deliveries(made.id)
    assert (first.delivery_id, first.attempt, first.epoch, first.outcome, first.error) == (
        f"{made.id}-1", 1, e1, Outcome.RETRY, "503")
    assert (first.started_ms, first.ended_ms, first.lateness_ms) == (NOW + 5, NOW + 10, 20)
    assert (second.delivery_id, second.attempt, second.epoch, second.outcome) == (
        f"{made.id}-2", 2, e2, Outcome.DELIVERED)
    assert second.lateness_ms == 70
    assert store.get(made.id).lateness_ms == 70


# -- health and metrics ----------------------------------------------------------------------


def test_counts_and_due_backlog(store: Store) -> None:
    assert store.counts() == dict.fromkeys(Status, 0)
    assert store.due_backlog(now_ms=NOW) == 0
    store.create([new(NOW - 1), new(NOW), new(NOW + 1)], now_ms=NOW - 10)
    assert store.due_backlog(now_ms=NOW) == 2
    assert store.due_backlog(now_ms=NOW + 1) == 3
    claim(store, store.next_epoch(), limit=1)
    assert store.due_backlog(now_ms=NOW) == 1
    assert store.counts()[Status.CLAIMED] == 1 and store.counts()[Status.PENDING] == 2


def test_beats(store: Store) -> None:
    assert store.last_beat("dispatcher") is None
    store.beat("dispatcher", now_ms=NOW)
    assert store.last_beat("dispatcher") == (NOW, {})
    store.beat("dispatcher", now_ms=NOW + 1, info={"batches": 3, "lag": [1, 2]})
    assert store.last_beat("dispatcher") == (NOW + 1, {"batches": 3, "lag": [1, 2]})
    assert store.last_beat("source") is None


def test_ping_and_buckets(store: Store) -> None:
    store.ping()
    assert store.buckets == BUCKETS


def test_forgotten_claim_markers_are_only_the_old_ones(store: Store) -> None:
    store.create([new(NOW - 1)], now_ms=NOW - 100)
    old = store.next_epoch()
    claim(store, old, now_ms=NOW)
    recent = store.next_epoch()
    claim(store, recent, now_ms=NOW + 60_000)
    assert store.forget_claims(before_ms=NOW + 1) == 1
    store.create([new(NOW + 1)], now_ms=NOW)
    # the recent marker stays: a replay of it still claims nothing new
    assert claim(store, recent, now_ms=NOW + 60_000) == []


def test_finished_by_slot_counts_each_minute_by_status(store: Store) -> None:
    minute = 60_000
    start = NOW - NOW % minute
    made = [s.id for s, _ in store.create(
        [NewSchedule(channel="out", payload=b"{}", due_ms=start + 5_000) for _ in range(4)],
        now_ms=start)]
    store.cancel(made[0], now_ms=start + 10_000)  # minute 0
    store.cancel(made[1], now_ms=start + minute + 1)  # minute 1
    rows = claim(store, store.next_epoch(), until_ms=start + 5_000, now_ms=start + 5_000)
    delivered, dead = [r for r in rows if r.id == made[2]], [r for r in rows if r.id == made[3]]
    store.acknowledge(epoch=rows[0].epoch, now_ms=start + 2 * minute + 7,
                      acks=[ack(delivered[0], Status.DELIVERED, ended_ms=start + 2 * minute + 7),
                            ack(dead[0], Status.DEAD, ended_ms=start + 2 * minute + 7)])
    found = store.finished_by_slot(from_ms=start, to_ms=start + 3 * minute, slot_ms=minute)
    assert [r[0] for r in found] == sorted(r[0] for r in found)  # in time order
    assert set(found) == {(start, Status.CANCELLED, 1), (start + minute, Status.CANCELLED, 1),
                          (start, Status.DEAD, 1), (start + 2 * minute, Status.DELIVERED, 1)}
    assert store.finished_by_slot(from_ms=start, to_ms=start + 3 * minute, slot_ms=minute,
                                  tenant="nobody") == []

"""Ordering keys, task keys and reschedule: the store's rules, on every backend."""

from __future__ import annotations

import pytest

from tocsin.abc import Store
from tocsin.domain import Status
from tocsin.errors import ConflictError, NotFoundError

from .test_store import LEASE, NOW, ack, claim, new


def _key_rows(store: Store, key: str, n: int, *, due: int = NOW - 1000) -> list[str]:
    made = store.create([new(due + i, ordering_key=key, payload=b'{"i":%d}' % i)
                         for i in range(n)], now_ms=NOW - 2000)
    return [s.id for s, _ in made]


def test_only_the_head_of_each_key_is_claimed(store: Store) -> None:
    a = _key_rows(store, "order-a", 3)
    b = _key_rows(store, "order-b", 2)
    loose = [s.id for s, _ in store.create([new(NOW - 500)], now_ms=NOW)]
    got = claim(store, store.next_epoch())
    assert {r.id for r in got} == {a[0], b[0], loose[0]}
    # nothing more of a key while its head is claimed
    assert claim(store, store.next_epoch()) == []
    [head] = [r for r in got if r.id == a[0]]
    store.acknowledge(epoch=head.epoch, acks=[ack(head, Status.DELIVERED)], now_ms=NOW)
    assert [r.id for r in claim(store, store.next_epoch())] == [a[1]]


def test_equal_due_times_go_in_enqueue_order(store: Store) -> None:
    same = [s.id for s, _ in store.create([new(NOW - 10, ordering_key="k", payload=b"%d" % i)
                                           for i in range(4)], now_ms=NOW)]
    seen = []
    for _ in range(4):
        [row] = claim(store, store.next_epoch())
        seen.append(row.id)
        store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DELIVERED)], now_ms=NOW)
    assert seen == same


def test_a_retrying_head_holds_its_key_but_no_other(store: Store) -> None:
    a = _key_rows(store, "stuck", 2)
    b = _key_rows(store, "fine", 2)
    first = claim(store, store.next_epoch())
    stuck = next(r for r in first if r.id == a[0])
    fine = next(r for r in first if r.id == b[0])
    store.acknowledge(epoch=stuck.epoch, acks=[ack(stuck, Status.PENDING, next_ms=NOW + 60_000),
                                               ack(fine, Status.DELIVERED)], now_ms=NOW)
    assert [r.id for r in claim(store, store.next_epoch())] == [b[1]]
    later = claim(store, store.next_epoch(), until_ms=NOW + 60_000, now_ms=NOW + 60_000)
    assert [(r.id, r.attempt) for r in later] == [(a[0], 2)]


def test_dead_head_continues_or_halts_until_resumed(store: Store) -> None:
    cont = _key_rows(store, "cont", 2)
    halt = _key_rows(store, "halt", 2)
    rows = {r.id: r for r in claim(store, store.next_epoch())}
    epoch = rows[cont[0]].epoch
    store.acknowledge(epoch=epoch, acks=[ack(rows[cont[0]], Status.DEAD),
                                         ack(rows[halt[0]], Status.DEAD, halt=True,
                                             error="HTTP 400")], now_ms=NOW)
    assert [r.id for r in claim(store, store.next_epoch())] == [cont[1]]
    [halted] = store.halted_keys()
    assert (halted.ordering_key, halted.schedule_id, halted.reason) == ("halt", halt[0],
                                                                         "HTTP 400")
    store.resume_key(tenant="default", ordering_key="halt")
    assert store.halted_keys() == []
    assert [r.id for r in claim(store, store.next_epoch())] == [halt[1]]
    with pytest.raises(NotFoundError):
        store.resume_key(tenant="default", ordering_key="halt")


def test_task_key_overwrites_while_pending_then_answers_the_completed(store: Store) -> None:
    def task(payload: bytes, **kw: object) -> list[tuple[str, bool, bytes]]:
        item = new(NOW - 100, key="remind:order-9", overwrite_pending=True, payload=payload,
                   **kw)
        return [(s.id, c, s.payload) for s, c in store.create([item], now_ms=NOW)]

    [(first, created, _)] = task(b'{"v":1}')
    assert created
    assert task(b'{"v":2}') == [(first, False, b'{"v":2}')]
    assert store.get(first).payload == b'{"v":2}'
    [row] = claim(store, store.next_epoch())
    with pytest.raises(ConflictError) as firing:
        task(b'{"v":3}')
    assert firing.value.status == "CLAIMED"
    store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DELIVERED)], now_ms=NOW)
    assert task(b'{"v":4}') == [(first, False, b'{"v":2}')]
    assert store.counts()[Status.PENDING] == 0
    # after the retention window the key is free again
    [(again, created, _)] = task(b'{"v":5}', key_retention_ms=0)
    assert created and again != first


def test_reschedule_while_pending_only(store: Store) -> None:
    [(made, _)] = store.create([new(NOW + 60_000)], now_ms=NOW)
    moved = store.reschedule(made.id, now_ms=NOW, due_ms=NOW - 5, payload=b'{"n":2}',
                             headers={"h": "1"})
    assert (moved.due_ms, moved.payload, moved.headers) == (NOW - 5, b'{"n":2}', {"h": "1"})
    [row] = claim(store, store.next_epoch())
    assert row.id == made.id and row.payload == b'{"n":2}'
    with pytest.raises(ConflictError) as late:
        store.reschedule(made.id, now_ms=NOW, due_ms=NOW + 1)
    assert late.value.status == "CLAIMED"
    assert store.get(made.id).due_ms == NOW - 5
    with pytest.raises(NotFoundError):
        store.reschedule("missing", now_ms=NOW, due_ms=NOW)


def test_lease_reclaim_keeps_a_keys_order(store: Store) -> None:
    a = _key_rows(store, "k", 2)
    [first] = claim(store, store.next_epoch())
    assert first.id == a[0]
    after = NOW + LEASE + 1
    [again] = claim(store, store.next_epoch(), until_ms=after, now_ms=after)
    assert again.id == a[0]

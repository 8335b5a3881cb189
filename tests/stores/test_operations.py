"""Re-drive and pause: the store's rules, on every backend."""

from __future__ import annotations

import pytest

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, Status
from tocsin.errors import ConflictError, NotFoundError, ValidationError

from .test_store import NOW, ack, claim, new


def _dead(store: Store, n: int = 1, **fields: object) -> list[str]:
    """``n`` schedules that died after one attempt."""
    made = [s.id for s, _ in store.create([new(NOW - 100 - i, **fields) for i in range(n)],
                                          now_ms=NOW - 200)]
    rows = claim(store, store.next_epoch())
    store.acknowledge(epoch=rows[0].epoch, acks=[ack(r, Status.DEAD, error="boom")
                                                 for r in rows], now_ms=NOW)
    assert {store.get(i).status for i in made} == {Status.DEAD}
    return made


def test_redrive_starts_a_new_chain_and_keeps_history(store: Store) -> None:
    [sid] = _dead(store)
    again = store.redrive(sid, now_ms=NOW + 1000)
    assert (again.status, again.next_ms, again.attempts) == (Status.PENDING, NOW + 1000, 1)
    [row] = claim(store, store.next_epoch(), until_ms=NOW + 1000, now_ms=NOW + 1000)
    # the attempt number goes on (so the delivery id is new); the chain starts after it
    assert (row.id, row.attempt, row.chain_base) == (sid, 2, 1)
    store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DELIVERED, ended_ms=NOW + 1010)],
                      now_ms=NOW + 1010)
    log = store.deliveries(sid)
    assert [(d.attempt, d.delivery_id) for d in log] == [(1, f"{sid}-1"), (2, f"{sid}-2")]
    assert store.get(sid).status is Status.DELIVERED


def test_redrive_refuses_a_live_schedule_and_another_tenants(store: Store) -> None:
    [(live, _)] = store.create([new(NOW + 60_000)], now_ms=NOW)
    with pytest.raises(ConflictError) as caught:
        store.redrive(live.id, now_ms=NOW)
    assert caught.value.status == "PENDING"
    [sid] = _dead(store, tenant="a")
    with pytest.raises(NotFoundError):
        store.redrive(sid, now_ms=NOW, tenant="b")
    with pytest.raises(NotFoundError):
        store.redrive("nope", now_ms=NOW)
    assert store.get(sid).status is Status.DEAD


def test_redrive_resumes_the_key_it_halted(store: Store) -> None:
    [(s, _)] = store.create([new(NOW - 10, ordering_key="k")], now_ms=NOW - 20)
    [row] = claim(store, store.next_epoch())
    store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DEAD, halt=True)], now_ms=NOW)
    assert [k.ordering_key for k in store.halted_keys()] == ["k"]
    store.redrive(s.id, now_ms=NOW)
    assert store.halted_keys() == []
    assert [r.id for r in claim(store, store.next_epoch())] == [s.id]


def test_redrive_by_predicate_is_bounded_chunked_and_filtered(store: Store) -> None:
    mine = _dead(store, 7, tenant="a", channel="out")
    other_channel = _dead(store, 2, tenant="a", channel="side")
    other_tenant = _dead(store, 2, tenant="b", channel="out")
    assert store.redrive_where(now_ms=NOW, tenant="a", channel="out", limit=5, chunk=2) == 5
    assert store.redrive_where(now_ms=NOW, tenant="a", channel="out", chunk=2) == 2
    assert {store.get(i).status for i in mine} == {Status.PENDING}
    assert {store.get(i).status for i in other_channel + other_tenant} == {Status.DEAD}
    due = {i: store.get(i).due_ms for i in other_tenant}
    first = min(due, key=due.__getitem__)
    assert store.redrive_where(now_ms=NOW, due_to_ms=due[first] + 1, tenant="b") == 1
    assert store.get(first).status is Status.PENDING
    with pytest.raises(ValidationError):
        store.redrive_where(now_ms=NOW, limit=0)


def test_a_paused_channel_waits_and_resumes(store: Store) -> None:
    for name in ("out", "side"):
        store.put_channel(ChannelSpec(name=name, kind=ChannelKind.FILE, config={"path": "/x"}))
    paused = store.pause_channel("out", tenant="default", now_ms=NOW)
    assert store.paused_channels() == [paused]
    assert store.paused_channels(tenant="other") == []
    held = [s.id for s, _ in store.create([new(NOW - 50) for _ in range(3)], now_ms=NOW)]
    [(free, _)] = store.create([new(NOW - 10, channel="side")], now_ms=NOW)
    assert store.next_due_ms(now_ms=NOW, lease_ms=60_000) == NOW - 10
    assert [r.id for r in claim(store, store.next_epoch())] == [free.id]
    assert {store.get(i).status for i in held} == {Status.PENDING}
    assert store.resume_channel("out", tenant="default")
    assert not store.resume_channel("out", tenant="default")
    assert {r.id for r in claim(store, store.next_epoch())} == set(held)


def test_pausing_an_unknown_channel_is_not_found(store: Store) -> None:
    with pytest.raises(NotFoundError):
        store.pause_channel("ghost", tenant="default", now_ms=NOW)
    store.put_channel(ChannelSpec(name="ghost", kind=ChannelKind.FILE, config={"path": "/x"},
                                  tenant="a"))
    with pytest.raises(NotFoundError):
        store.pause_channel("ghost", tenant="b", now_ms=NOW)

"""Bulk cancel and reschedule by predicate (:class:`~tocsin.abc.BulkChangeStore`), on every
backend."""

from __future__ import annotations

import threading

import pytest

from tocsin.abc import Store
from tocsin.domain import Selection, Status
from tocsin.errors import ValidationError

from .test_store import NOW, claim, new


def _make(store: Store, n: int, **fields: object) -> list[str]:
    return [s.id for s, _ in store.create([new(NOW + 1000 + i, **fields) for i in range(n)],
                                         now_ms=NOW)]


def _statuses(store: Store, ids: list[str]) -> set[Status]:
    return {store.get(i).status for i in ids}


def test_cancel_by_each_filter(store: Store) -> None:
    base = _make(store, 3)
    prefixed = [s.id for s, _ in store.create(
        [new(NOW + 5000, key=f"campaign-7/{i}") for i in range(3)]
        + [new(NOW + 5000, key="campaign-70")], now_ms=NOW)]
    ordered = _make(store, 2, ordering_key="o-1")
    other = _make(store, 2, channel="side")
    late = [s.id for s, _ in store.create(
        [new(NOW + 99_000)], now_ms=NOW)]
    got = store.cancel_where(Selection(key_prefix="campaign-7/"), now_ms=NOW)
    assert (got.matched, got.changed, got.too_late, got.more) == (3, 3, 0, False)
    assert _statuses(store, prefixed[:3]) == {Status.CANCELLED}
    assert store.get(prefixed[3]).status is Status.PENDING
    assert store.cancel_where(Selection(ordering_key="o-1"), now_ms=NOW).changed == 2
    assert store.cancel_where(Selection(channel="side"), now_ms=NOW).changed == 2
    assert store.cancel_where(Selection(due_from_ms=NOW + 50_000), now_ms=NOW).changed == 1
    assert store.get(late[0]).status is Status.CANCELLED
    assert _statuses(store, base) == {Status.PENDING}
    assert _statuses(store, ordered + other) == {Status.CANCELLED}
    # Cancelled rows are no longer matched: a second run changes nothing.
    again = store.cancel_where(Selection(channel="side"), now_ms=NOW)
    assert (again.matched, again.changed) == (0, 0)


def test_firings_of_a_recurring_rule(store: Store) -> None:
    firing = [s.id for s, _ in store.create(
        [new(NOW + 1000, recurring_id="rec-1", firing_ms=NOW + i) for i in range(2)],
        now_ms=NOW)]
    keep = _make(store, 1)
    assert store.cancel_where(Selection(recurring_id="rec-1"), now_ms=NOW).changed == 2
    assert _statuses(store, firing) == {Status.CANCELLED}
    assert _statuses(store, keep) == {Status.PENDING}


def test_firing_schedules_are_too_late_and_untouched(store: Store) -> None:
    ids = _make(store, 4)
    claimed = {r.id for r in claim(store, store.next_epoch(), until_ms=NOW + 1001, limit=2)}
    assert len(claimed) == 2
    got = store.cancel_where(Selection(channel="out"), now_ms=NOW)
    assert (got.matched, got.changed, got.too_late) == (4, 2, 2)
    assert {i: store.get(i).status for i in claimed} == dict.fromkeys(claimed, Status.CLAIMED)
    assert _statuses(store, [i for i in ids if i not in claimed]) == {Status.CANCELLED}


def test_tenant_scope(store: Store) -> None:
    mine = _make(store, 2, tenant="t1")
    theirs = _make(store, 2, tenant="t2")
    got = store.cancel_where(Selection(tenant="t1", channel="out"), now_ms=NOW)
    assert got.changed == 2
    assert _statuses(store, mine) == {Status.CANCELLED}
    assert _statuses(store, theirs) == {Status.PENDING}


def test_limit_and_chunks(store: Store) -> None:
    ids = _make(store, 23)
    first = store.cancel_where(Selection(channel="out"), now_ms=NOW, limit=10, chunk=3)
    assert (first.changed, first.more) == (10, True)
    rest = store.cancel_where(Selection(channel="out"), now_ms=NOW, limit=None, chunk=4)
    assert (rest.changed, rest.more) == (13, False)
    assert _statuses(store, ids) == {Status.CANCELLED}


def test_reschedule_to_a_time_and_by_a_shift(store: Store) -> None:
    moved = [s.id for s, _ in store.create([new(NOW + 1000, key=f"k/{i}") for i in range(3)],
                                           now_ms=NOW)]
    other = _make(store, 1)
    got = store.reschedule_where(Selection(key_prefix="k/"), now_ms=NOW, shift_ms=60_000,
                                 chunk=2)
    assert (got.matched, got.changed, got.more) == (3, 3, False)
    assert {store.get(i).due_ms for i in moved} == {NOW + 61_000}
    assert store.get(other[0]).due_ms == NOW + 1000
    store.reschedule_where(Selection(key_prefix="k/"), now_ms=NOW, due_ms=NOW + 7)
    assert {(store.get(i).due_ms, store.get(i).status) for i in moved} == {
        (NOW + 7, Status.PENDING)}
    # The new due time is what the dispatcher claims by.
    assert {r.id for r in claim(store, store.next_epoch(), until_ms=NOW + 7)} == set(moved)


def test_bad_selections_name_the_field(store: Store) -> None:
    for fields, field in (({}, "selection"), ({"tenant": "t1"}, "selection"),
                          ({"key_prefix": ""}, "key_prefix"),
                          ({"due_from_ms": 5, "due_to_ms": 5}, "due_to")):
        with pytest.raises(ValidationError) as caught:
            Selection(**fields)  # type: ignore[arg-type]
        assert caught.value.field == field
    with pytest.raises(ValidationError) as caught:
        store.reschedule_where(Selection(channel="out"), now_ms=NOW)
    assert caught.value.field == "due_at"
    with pytest.raises(ValidationError):
        store.cancel_where(Selection(channel="out"), now_ms=NOW, limit=0)


def test_a_cancel_racing_claims_never_cancels_a_claimed_row(store: Store) -> None:
    ids = set(_make(store, 600))
    claimed: set[str] = set()

    def claimer() -> None:
        for _ in range(20):
            claimed.update(r.id for r in claim(store, store.next_epoch(), until_ms=NOW + 2000,
                                               limit=20))

    thread = threading.Thread(target=claimer)
    thread.start()
    got = store.cancel_where(Selection(channel="out"), now_ms=NOW, limit=None, chunk=25)
    thread.join()
    cancelled = {i for i in ids if store.get(i).status is Status.CANCELLED}
    assert not cancelled & claimed
    assert {store.get(i).status for i in claimed} <= {Status.CLAIMED}
    assert got.changed == len(cancelled)
    assert got.changed + got.too_late == got.matched
    assert cancelled | claimed | {i for i in ids if store.get(i).status is Status.PENDING} == ids

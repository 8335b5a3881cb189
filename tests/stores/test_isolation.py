"""Tenant isolation in the store, noun by noun, on every backend: ``tenant="x"`` sees and
changes only tenant x's rows, and another tenant's id answers NotFoundError exactly like a
missing one; channels and policies are namespaced (the same name in two tenants is two)."""

from __future__ import annotations

import dataclasses

import pytest

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, CronTrigger, Policy, Recurring, Status
from tocsin.errors import ConflictError, NotFoundError, ValidationError

from .test_store import NOW, ack, claim, new


def _channel(tenant: str, path: str) -> ChannelSpec:
    return ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": path}, tenant=tenant)


def _rec(rid: str, tenant: str, **fields: object) -> Recurring:
    return Recurring(id=rid, tenant=tenant, trigger=CronTrigger.parse("* * * * *", "UTC"),
                     channel="out", payload=b"1", **fields)  # type: ignore[arg-type]


def test_schedules_by_id_and_list(store: Store) -> None:
    [(a, _)] = store.create([new(NOW + 60_000, tenant="a")], now_ms=NOW)
    [(b, _)] = store.create([new(NOW + 60_000, tenant="b")], now_ms=NOW)
    assert store.get(a.id, tenant="a") == a and store.get(a.id) == a
    with pytest.raises(NotFoundError):
        store.get(a.id, tenant="b")
    assert [s.id for s in store.list_schedules(tenant="a")] == [a.id]
    assert {s.id for s in store.list_schedules()} == {a.id, b.id}
    with pytest.raises(NotFoundError):
        store.cancel(a.id, now_ms=NOW, tenant="b")
    with pytest.raises(NotFoundError):
        store.reschedule(a.id, now_ms=NOW, due_ms=NOW + 1, tenant="b")
    with pytest.raises(NotFoundError):
        store.deliveries(a.id, tenant="b")
    assert store.get(a.id) == a  # untouched by b's attempts
    assert store.deliveries(a.id, tenant="a") == []
    assert store.reschedule(a.id, now_ms=NOW, due_ms=NOW + 5, tenant="a").due_ms == NOW + 5
    assert store.cancel(a.id, now_ms=NOW, tenant="a").status is Status.CANCELLED


def test_pending_count_is_per_tenant(store: Store) -> None:
    store.create([new(NOW, tenant="a") for _ in range(3)] + [new(NOW, tenant="b")], now_ms=NOW)
    assert (store.pending_count(tenant="a"), store.pending_count(tenant="b")) == (3, 1)
    [row, *_] = [r for r in claim(store, store.next_epoch()) if r.tenant == "a"]
    assert store.pending_count(tenant="a") == 3  # claimed still counts
    store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DELIVERED)], now_ms=NOW)
    assert store.pending_count(tenant="a") == 2
    assert store.pending_count(tenant="nobody") == 0


def test_halted_keys_are_per_tenant(store: Store) -> None:
    store.create([new(NOW, tenant=t, ordering_key="k") for t in ("a", "b")], now_ms=NOW)
    rows = claim(store, store.next_epoch())
    store.acknowledge(epoch=rows[0].epoch, acks=[ack(r, Status.DEAD, halt=True) for r in rows],
                      now_ms=NOW)
    assert [h.tenant for h in store.halted_keys(tenant="a")] == ["a"]
    assert len(store.halted_keys()) == 2
    store.resume_key(tenant="a", ordering_key="k")
    assert [h.tenant for h in store.halted_keys()] == ["b"]
    with pytest.raises(NotFoundError):
        store.resume_key(tenant="a", ordering_key="k")


def test_channels_are_namespaced(store: Store) -> None:
    store.put_channel(_channel("a", "/a"))
    store.put_channel(_channel("b", "/b"))
    assert store.get_channel("out", tenant="a").config == {"path": "/a"}
    assert store.get_channel("out", tenant="b") == _channel("b", "/b")
    with pytest.raises(NotFoundError):
        store.get_channel("out", tenant="c")
    assert [c.tenant for c in store.list_channels()] == ["a", "b"]
    assert store.list_channels(tenant="b") == [_channel("b", "/b")]
    store.put_channel(_channel("a", "/a2"))  # replaces a's only
    assert store.get_channel("out", tenant="b").config == {"path": "/b"}
    store.delete_channel("out", tenant="a")
    with pytest.raises(NotFoundError):
        store.delete_channel("out", tenant="a")
    assert store.list_channels() == [_channel("b", "/b")]


def test_a_dead_letter_stays_in_its_tenant(store: Store) -> None:
    [(made, _)] = store.create([new(NOW, tenant="a")], now_ms=NOW)
    [row] = claim(store, store.next_epoch())
    store.acknowledge(epoch=row.epoch, acks=[ack(row, Status.DEAD, dead_letter="graveyard")],
                      now_ms=NOW)
    [copy] = [s for s in store.list_schedules() if s.id != made.id]
    assert (copy.tenant, copy.channel) == ("a", "graveyard")


def test_recurring_by_id_and_list(store: Store) -> None:
    store.create_recurring(_rec("rec-a", "a"), now_ms=NOW)
    store.create_recurring(_rec("rec-b", "b"), now_ms=NOW)
    assert store.get_recurring("rec-a", tenant="a").tenant == "a"
    for attempt in (lambda: store.get_recurring("rec-a", tenant="b"),
                    lambda: store.recurring_firings("rec-a", tenant="b"),
                    lambda: store.delete_recurring("rec-a", now_ms=NOW, tenant="b"),
                    lambda: store.update_recurring(_rec("rec-a", "b", paused=True), now_ms=NOW)):
        with pytest.raises(NotFoundError):
            attempt()
    assert not store.get_recurring("rec-a").paused
    assert [r.id for r in store.list_recurring(tenant="b")] == ["rec-b"]
    assert store.update_recurring(_rec("rec-a", "a", paused=True), now_ms=NOW).paused
    assert store.recurring_firings("rec-a", tenant="a") == []
    assert store.delete_recurring("rec-a", now_ms=NOW, tenant="a") == 0
    assert [r.id for r in store.list_recurring()] == ["rec-b"]


def test_a_recurring_names_a_policy_of_its_own_tenant(store: Store) -> None:
    store.put_policy(Policy(name="p", max_in_flight=1, tenant="a"), now_ms=NOW)
    store.create_recurring(_rec("rec-a", "a", policy="p"), now_ms=NOW)
    with pytest.raises(ValidationError):
        store.create_recurring(_rec("rec-b", "b", policy="p"), now_ms=NOW)


def test_a_failed_recurring_is_no_longer_due_and_blocks_no_other(store: Store) -> None:
    store.create_recurring(_rec("rec-1", "a"), now_ms=NOW)
    store.create_recurring(_rec("rec-2", "a"), now_ms=NOW)
    failed = store.fail_recurring("rec-1", reason="expansion overflows", now_ms=NOW + 1)
    assert (failed.failed_reason, failed.failed_ms, failed.next_expand_ms) == (
        "expansion overflows", NOW + 1, None)
    assert store.get_recurring("rec-1").failed_reason == "expansion overflows"
    due = store.recurring_due(bucket_lo=0, bucket_hi=store.buckets - 1, now_ms=NOW + 10,
                              limit=10)
    assert [r.id for r in due] == ["rec-2"]
    assert store.next_expansion_ms() == NOW
    with pytest.raises(NotFoundError):
        store.fail_recurring("absent", reason="x", now_ms=NOW)
    # changing the rule is the fix: it is expanded again
    revived = store.update_recurring(dataclasses.replace(failed, paused=False), now_ms=NOW + 2)
    assert (revived.failed_reason, revived.failed_ms, revived.next_expand_ms) == (
        None, None, NOW + 2)


def test_policies_are_namespaced(store: Store) -> None:
    store.put_policy(Policy(name="p", max_in_flight=1, tenant="a"), now_ms=NOW)
    store.put_policy(Policy(name="p", max_in_flight=2, tenant="b"), now_ms=NOW)
    assert store.get_policy("p", tenant="a").max_in_flight == 1
    assert store.get_policy("p", tenant="b") == Policy(name="p", max_in_flight=2, tenant="b")
    with pytest.raises(NotFoundError):
        store.get_policy("p", tenant="c")
    assert [(p.tenant, p.max_in_flight) for p in store.list_policies()] == [("a", 1), ("b", 2)]
    assert [p.tenant for p in store.list_policies(tenant="b")] == ["b"]
    # each tenant's schedules draw on its own policy's tokens
    store.create([new(NOW, tenant=t, policy="p") for t in ("a", "a", "b", "b", "b")],
                 now_ms=NOW)
    rows = claim(store, store.next_epoch())
    assert sorted(r.tenant for r in rows) == ["a", "b", "b"]
    assert store.in_flight("p", tenant="a", now_ms=NOW) == 1
    assert store.in_flight("p", tenant="b", now_ms=NOW) == 2
    # every token is held: the next claimable is when a token lease runs out
    assert store.next_due_ms(now_ms=NOW, lease_ms=10**9) == NOW + 300_000
    a_row = next(r for r in rows if r.tenant == "a")
    store.acknowledge(epoch=a_row.epoch, acks=[ack(r, Status.DELIVERED) for r in rows],
                      now_ms=NOW)
    assert not store.release(f"{a_row.id}-1", now_ms=NOW, tenant="b")  # not b's token
    assert store.release(f"{a_row.id}-1", now_ms=NOW, tenant="a")
    [last] = claim(store, store.next_epoch())  # a's token is free again, b's are held
    assert last.tenant == "a"
    store.acknowledge(epoch=last.epoch, acks=[ack(last, Status.DELIVERED)], now_ms=NOW)
    # a's policy is no longer in use; b's is, by its one waiting schedule
    store.delete_policy("p", tenant="a")
    with pytest.raises(ConflictError):
        store.delete_policy("p", tenant="b")
    assert [p.tenant for p in store.list_policies()] == ["b"]
    with pytest.raises(NotFoundError):
        store.delete_policy("p", tenant="c")

"""The claim's fair share between destinations, on both stores, and the share arithmetic
alone: a destination alone takes the whole claim; beside others each tenant gets rows by its
weight; a held destination's rows are passed over and never read."""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from tocsin.abc import ChannelHold, Store
from tocsin.domain import NewSchedule, Tenant
from tocsin.stores.sql.fair import shares

from .test_store import NOW, claim, new

BURST = 2_000


def _burst_and_trickle(store: Store, *, trickle: int = 10) -> None:
    """A burst of tenant ``big`` due a second before a few schedules of tenant ``small``."""
    store.create([new(NOW - 1_000, tenant="big") for _ in range(BURST)], now_ms=NOW - 2_000)
    store.create([new(NOW - 100 + i, tenant="small") for i in range(trickle)], now_ms=NOW - 2_000)


def _tenants(rows: list) -> Counter[str]:
    return Counter(r.tenant for r in rows)


def test_a_destination_alone_takes_the_whole_claim(store: Store) -> None:
    store.create([new(NOW - 1_000 + i % 7, tenant="big") for i in range(300)],
                 now_ms=NOW - 2_000)
    rows = claim(store, store.next_epoch(), limit=100)
    assert len(rows) == 100
    assert [r.due_ms for r in rows] == sorted(r.due_ms for r in rows), "earliest first"


def test_a_burst_shares_each_claim_with_another_tenants_work(store: Store) -> None:
    _burst_and_trickle(store)
    rows = claim(store, store.next_epoch(), limit=100)
    assert _tenants(rows) == {"big": 90, "small": 10}, "the trickle is not left behind the burst"


def test_weights_split_a_claim_between_tenants(store: Store) -> None:
    store.put_tenant(Tenant("big", weight=3), now_ms=NOW)
    store.create([new(NOW - 1_000, tenant="big") for _ in range(400)], now_ms=NOW - 2_000)
    store.create([new(NOW - 500, tenant="small") for _ in range(400)], now_ms=NOW - 2_000)
    rows = claim(store, store.next_epoch(), limit=100)
    assert _tenants(rows) == {"big": 75, "small": 25}


def test_channels_of_one_tenant_share_its_part(store: Store) -> None:
    for name in ("a", "b"):
        store.create([new(NOW - 100, tenant="t", channel=name) for _ in range(200)],
                     now_ms=NOW - 2_000)
    store.create([new(NOW - 100, tenant="u", channel="a") for _ in range(200)],
                 now_ms=NOW - 2_000)
    rows = claim(store, store.next_epoch(), limit=100)
    assert Counter((r.tenant, r.channel) for r in rows) == {("t", "a"): 25, ("t", "b"): 25,
                                                            ("u", "a"): 50}


def test_a_held_burst_is_passed_over(store: Store) -> None:
    _burst_and_trickle(store)
    store.hold_channel(ChannelHold("big", "out", "busy", NOW, NOW + 10_000, 0, None, "me"))
    rows = claim(store, store.next_epoch(), limit=100)
    assert _tenants(rows) == {"small": 10}
    assert store.next_claimable_ms(bucket_lo=0, bucket_hi=15, until_ms=NOW, now_ms=NOW,
                                   lease_ms=60_000) is None, "nothing else claimable"
    later = NOW + 5_000
    store.create([NewSchedule(channel="out", tenant="small", payload=b"{}", due_ms=later)],
                 now_ms=NOW)
    assert store.next_due_ms(now_ms=NOW, lease_ms=60_000) == later, "the held burst is not due"
    store.unhold_channel("big", "out")
    assert store.next_due_ms(now_ms=NOW, lease_ms=60_000) == NOW - 1_000


def test_every_due_row_is_claimed_in_the_end(store: Store) -> None:
    _burst_and_trickle(store, trickle=50)
    seen: list = []
    while batch := claim(store, store.next_epoch(), limit=300):
        seen += batch
    assert len(seen) == len({r.id for r in seen}) == BURST + 50


@given(st.lists(st.tuples(st.sampled_from("abc"), st.sampled_from("xyz")), min_size=1,
                max_size=9, unique=True),
       st.dictionaries(st.sampled_from("abc"), st.integers(1, 5)),
       st.integers(0, 50))
def test_shares_add_up_and_follow_the_weights(destinations: list[tuple[str, str]],
                                              weight: dict[str, int], room: int) -> None:
    got = shares(destinations, weight, room)
    assert sum(got.values()) == room
    assert all(n > 0 for n in got.values()) and set(got) <= set(destinations)
    if len(destinations) <= room:
        tenants = {t for t, _ in destinations}
        per = {t: sum(n for (u, _), n in got.items() if u == t) for t in tenants}
        total = sum(weight.get(t, 1) for t in tenants)
        for t in tenants:  # within the rounding, each tenant its weight's part
            exact = room * weight.get(t, 1) / total
            assert abs(per[t] - exact) <= len(destinations) + 1


def test_statistics_are_refreshed_once_a_burst_outgrows_them(store: Store,
                                                              store_url: str) -> None:
    """PostgreSQL plans the claim by its statistics; a burst that doubles the table gets them
    refreshed at the dispatcher's next look (SQLite needs none)."""
    postgres = store_url.startswith("postgresql")
    assert store.refresh_statistics(when_stale=True) is False, "an empty table is never stale"
    for _ in range(3):
        store.create([new(NOW, tenant="big") for _ in range(10_000)], now_ms=NOW - 2_000)
    assert store.refresh_statistics(when_stale=True) is postgres
    assert store.refresh_statistics(when_stale=True) is False, "fresh ones are not redone"

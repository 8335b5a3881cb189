"""Issue 42: a label selector's reads on both stores (list, its pages and sorts, re-drive, bulk
changes, stats), within a tenant and across every tenant, and the plans that make a page of a
selector read a page of the label index, not every entry of the pair."""

from __future__ import annotations

from typing import Any

from tocsin.abc import Store
from tocsin.domain import Ack, NewSchedule, Outcome, ScheduleOrder, Selection, Status
from tocsin.stores.sql.labels import PROBE_CAP, rarest_first, selected

NOW = 1_900_000_000_000
BUCKETS = 16


def _make(store: Store, count: int, labels: dict[str, str], *, tenant: str = "default",
          due: int = NOW + 3_600_000) -> list[str]:
    made = store.create([NewSchedule(channel="out", payload=b"{}", due_ms=due + i,
                                     tenant=tenant, labels=labels) for i in range(count)],
                        now_ms=NOW)
    return [s.id for s, _ in made]


def test_list_pages_sorts_and_tenants(store: Store) -> None:
    a = _make(store, 12, {"team": "a", "run": "1"})
    b = _make(store, 5, {"team": "b", "run": "1"})
    other = _make(store, 3, {"team": "a", "run": "1"}, tenant="acme")
    _make(store, 4, {})
    sel = (("run", "1"), ("team", "a"))
    assert [s.id for s in store.list_schedules(labels=sel, tenant="default", limit=100)] \
        == sorted(a)
    assert [s.id for s in store.list_schedules(labels=sel, limit=100)] == sorted(a + other)
    assert {s.id for s in store.list_schedules(labels=(("run", "1"),), limit=100)} == {
        *a, *b, *other}
    pages, cursor = [], None
    while page := store.list_schedules(labels=sel, tenant="default", after_id=cursor, limit=5):
        pages.append([s.id for s in page])
        cursor = page[-1].id
    assert [len(p) for p in pages] == [5, 5, 2] and [i for p in pages for i in p] == sorted(a)
    due = store.list_schedules(labels=(("team", "b"),), order=ScheduleOrder.DUE, limit=3)
    assert [s.id for s in due] == list(reversed(b))[:3]  # latest due first
    store.cancel(a[0], now_ms=NOW)
    assert [s.id for s in store.list_schedules(labels=sel, status=Status.CANCELLED)] == [a[0]]
    assert store.list_schedules(labels=(("team", "nobody"),)) == []


def test_bulk_changes_and_stats_by_label(store: Store) -> None:
    a = _make(store, 7, {"team": "a"}, due=NOW + 60_000)
    _make(store, 3, {"team": "b"}, due=NOW + 60_000)
    _make(store, 2, {})
    done = store.cancel_where(Selection(labels=(("team", "a"),)), now_ms=NOW, chunk=2)
    assert (done.matched, done.changed) == (7, 7)
    assert {store.get(i).status for i in a} == {Status.CANCELLED}
    figures = store.stats(now_ms=NOW, window_ms=3_600_000, ahead_ms=3_600_000,
                          labels=(("team", "b"),))
    assert [(f.channel, f.pending, f.due_soon, f.cancelled) for f in figures] == [
        ("out", 3, 3, 0)]
    figures = store.stats(now_ms=NOW + 1, window_ms=3_600_000, ahead_ms=3_600_000,
                          labels=(("team", "a"),), tenant="default")
    assert [(f.pending, f.cancelled) for f in figures] == [(0, 7)]
    everything = store.stats(now_ms=NOW + 1, window_ms=3_600_000, ahead_ms=3_600_000)
    assert [(f.pending, f.cancelled) for f in everything] == [(5, 7)]


def test_stats_by_label_sample_the_labelled_attempts(store: Store) -> None:
    """Lateness by label comes from the labelled schedules' attempts, not from a sample of
    every attempt filtered afterwards."""
    labelled = _make(store, 2, {"team": "a"}, due=NOW - 1000)
    _make(store, 6, {}, due=NOW - 1000)
    rows = store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=BUCKETS - 1,
                       until_ms=NOW, now_ms=NOW, lease_ms=60_000, limit=100)
    acks = [Ack(schedule_id=r.id, delivery_id=f"{r.id}-1", attempt=1,
                outcome=Outcome.DELIVERED, error=None, started_ms=NOW, ended_ms=NOW,
                due_ms=NOW - (500 if r.id in labelled else 9000), status=Status.DELIVERED)
            for r in rows]
    assert len(acks) == 8
    store.acknowledge(epoch=rows[0].epoch, now_ms=NOW, acks=acks)
    [figures] = store.stats(now_ms=NOW + 1, window_ms=60_000, ahead_ms=60_000,
                            labels=(("team", "a"),))
    assert (figures.delivered, figures.lateness_ms) == (2, (500, 500, 500, 500))


def test_the_rarest_pair_is_walked(store: Store) -> None:
    sql: Any = store
    _make(store, 30, {"team": "a", "kind": "x"})
    _make(store, 2, {"team": "a", "kind": "y"})
    pairs = (("team", "a"), ("kind", "y"))
    assert rarest_first(sql, pairs, tenant="default") == (("kind", "y"), ("team", "a"))
    assert rarest_first(sql, pairs, tenant=None)[0] == ("kind", "y")
    assert PROBE_CAP >= 100


def _plan(store: Any, tenant: str | None, pairs: tuple[tuple[str, str], ...]) -> str:
    source, args = selected(pairs, tenant=tenant)
    where = "" if tenant is None else " WHERE tenant = ?"
    sql = f"SELECT id FROM {source}{where} ORDER BY id LIMIT 100"
    params = [*args] + ([] if tenant is None else [tenant])
    explain = ("EXPLAIN QUERY PLAN " if "sqlite" in type(store).__name__.lower()
               else "EXPLAIN ")
    return "\n".join(str(r[-1] if len(r) > 1 else r[0]) for r in store._rows(
        explain + sql, params))


def test_a_page_of_a_selector_reads_the_label_index_in_id_order(store: Store) -> None:
    """The plan of a page: the label index (the primary key within a tenant, the pair index
    across tenants) read in id order, each schedule by its key; on SQLite no sort of every
    match."""
    made = store.create([NewSchedule(channel="out", payload=b"{}", due_ms=NOW + i,
                                     labels={"team": f"t{i % 50}", "n": str(i)})
                         for i in range(5000)], now_ms=NOW)
    assert len(made) == 5000
    sqlite = "sqlite" in type(store).__name__.lower()
    sql: Any = store
    sql._changed("ANALYZE")
    for tenant in ("default", None):
        plan = _plan(store, tenant, (("team", "t7"),))
        if sqlite:
            index = "PRIMARY KEY" if tenant else "COVERING INDEX schedule_labels_pair"
            assert f"SEARCH l0 USING {index}" in plan, plan
            assert "TEMP B-TREE" not in plan, plan
        else:  # a plan by costs: at this size a sort of the pair's entries is cheap (the
            # plan at 10 M schedules is bench/labels.py's)
            assert ("schedule_labels_pkey" if tenant else "schedule_labels_pair") in plan, plan

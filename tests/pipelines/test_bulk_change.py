"""``tocsin bulk cancel|reschedule``: the Spark batch job by bucket ranges, on both stores."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from tocsin.config import Settings
from tocsin.domain import NewSchedule, Selection, Status
from tocsin.pipelines.bulk_change import BulkOp, bucket_ranges, run_bulk_change
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NOW = 1_700_000_000_000


def test_bucket_ranges_cover_every_bucket_once() -> None:
    for buckets, parts in ((16, 4), (16, 5), (64, 3), (3, 8), (1, 1)):
        ranges = bucket_ranges(buckets, parts)
        covered = [b for lo, hi in ranges for b in range(lo, hi + 1)]
        assert covered == list(range(buckets)), (buckets, parts)


def test_cancel_and_reschedule_by_predicate(spark: SparkSession, backend_url: str,
                                            tmp_path: Path) -> None:
    settings = Settings(store=backend_url, home=tmp_path, buckets=16)
    store = open_store(backend_url, buckets=16)
    items = ([NewSchedule(channel="out", payload=b"{}", due_ms=NOW + 60_000,
                          key=f"campaign-7/{i}") for i in range(3000)]
             + [NewSchedule(channel="out", payload=b"{}", due_ms=NOW + 60_000,
                            key=f"campaign-8/{i}") for i in range(500)]
             + [NewSchedule(channel="out", payload=b"{}", due_ms=NOW + 60_000, tenant="t2",
                            key=f"campaign-7/{i}") for i in range(200)])
    made = store.create(items, now_ms=NOW)
    firing = {r.id for r in store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=15,
                                        until_ms=NOW + 60_000, now_ms=NOW, lease_ms=600_000,
                                        limit=50)}
    got = run_bulk_change(spark, BulkOp.CANCEL,
                          Selection(tenant="default", key_prefix="campaign-7/"),
                          settings=settings, partitions=4)
    want_late = sum(1 for s, _ in made[:3000] if s.id in firing)
    assert got == {"op": "cancel", "matched": 3000, "changed": 3000 - want_late,
                   "too_late": want_late, "partitions": 4}
    status = {s.id: store.get(s.id).status for s, _ in made}
    assert {status[s.id] for s, _ in made[:3000] if s.id not in firing} == {Status.CANCELLED}
    assert {status[i] for i in firing} == {Status.CLAIMED}
    assert {status[s.id] for s, _ in made[3000:] if s.id not in firing} == {Status.PENDING}
    moved = run_bulk_change(spark, BulkOp.RESCHEDULE, Selection(key_prefix="campaign-8/"),
                            settings=settings, due_ms=NOW + 999_000, partitions=3)
    assert moved["changed"] + moved["too_late"] == 500
    assert {store.get(s.id).due_ms for s, _ in made[3000:3500] if s.id not in firing} == {
        NOW + 999_000}
    store.close()

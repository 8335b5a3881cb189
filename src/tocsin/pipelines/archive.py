"""``tocsin archive``: move finished schedules and their attempts out of the store, to Parquet.

A Spark batch job in four steps, each checked before the next:

1. **Read** (executors, one bucket range per partition): finished schedules (DELIVERED,
   CANCELLED, DEAD, recurring firings among them) that finished before their tenant's
   retention, by a range of the ``schedules_finished`` index, in id order.
2. **Write** them to ``<archive>/schedules/run=<ms>/day=<finished day>/tenant=<t>/`` and
   read the files back: the count must equal what was read, or the job stops (nothing is
   deleted).
3. **Attempts** of exactly the written schedules go to ``<archive>/deliveries/run=<ms>/``
   (same day and tenant as their schedule), counted the same way.
4. **Delete** the written schedules and their attempts from the store, a chunk of
   :data:`DELETE_CHUNK` per transaction, so dispatch and the API wait at most one small
   transaction. A schedule re-driven meanwhile is no longer finished and stays.

Task keys: a schedule with a key is kept at least ``task_key_retention_seconds`` (a completed
task key answers repeats that long), whatever its tenant's retention. A run that stops between
steps 2 and 4 leaves rows both archived and stored: the next run archives them again under its
own ``run=`` folder, so readers drop repeats by ``id`` (``tocsin report`` does).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.errors import TocsinError, ValidationError
from tocsin.pipelines.bulk_change import bucket_ranges
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DELETE_CHUNK", "ArchiveJob", "Retention", "run_archive", "start_archive_timer"]

READ_CHUNK = 2_000
DELETE_CHUNK = 500
"""Schedules deleted per transaction."""
_DAY_MS = 86_400_000
SCHEDULE_SCHEMA = (
    "id string, tenant string, channel string, payload binary, payload_kind string, "
    "headers string, due_ms long, bucket int, status string, attempts int, created_ms long, "
    "delivered_ms long, last_error string, key string, ordering_key string, policy string, "
    "recurring_id string, firing_ms long, finished_ms long, day string, archived_ms long")
DELIVERY_SCHEMA = (
    "delivery_id string, schedule_id string, attempt int, epoch long, started_ms long, "
    "ended_ms long, outcome string, error string, lateness_ms long, tenant string, "
    "channel string, day string, archived_ms long")


class ArchiveCheckError(TocsinError):
    """The archive's files do not hold what was read: nothing was deleted."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Retention:
    """How long finished schedules stay in the store: a default, per-tenant overrides, and
    the task-key bound (a keyed schedule stays at least ``key_ms``)."""

    default_ms: int
    by_tenant: tuple[tuple[str, int], ...] = ()
    key_ms: int = 0

    @staticmethod
    def from_settings(settings: Settings) -> Retention:
        """The retention the settings give; a bad override names its field."""
        pairs = []
        for entry in settings.archive_tenant_retention:
            tenant, _, seconds = entry.partition("=")
            try:
                pairs.append((tenant.strip(), int(float(seconds) * 1000)))
            except ValueError:
                raise ValidationError("archive_tenant_retention",
                                      f"{entry!r} is not TENANT=SECONDS") from None
            if not tenant.strip() or pairs[-1][1] < 0:
                raise ValidationError("archive_tenant_retention",
                                      f"{entry!r} is not TENANT=SECONDS")
        return Retention(default_ms=int(settings.archive_retention_seconds * 1000),
                         by_tenant=tuple(pairs), key_ms=settings.key_retention_ms)

    def cutoff(self, tenant: str, *, keyed: bool, now_ms: int) -> int:
        """Schedules of ``tenant`` that finished before this are archived."""
        kept = dict(self.by_tenant).get(tenant, self.default_ms)
        return now_ms - max(kept, self.key_ms if keyed else 0)

    def widest(self, now_ms: int) -> int:
        """The latest cutoff of any tenant (the index range every read covers)."""
        return now_ms - min([self.default_ms, *(ms for _, ms in self.by_tenant)])


@dataclass(frozen=True, kw_only=True, slots=True)
class ArchiveJob:
    """One archive run, picklable for the executors."""

    store_url: str
    buckets: int
    now_ms: int
    retention: Retention

    def _store(self) -> Any:
        from tocsin.dispatcher.runtime import store_for

        return store_for(self.store_url, self.buckets)

    def schedules(self, lo: int, hi: int) -> Iterator[tuple[Any, ...]]:
        """The archived rows (``SCHEDULE_SCHEMA``) of buckets ``lo..hi`` (on an executor)."""
        from tocsin.stores.sql.archive import finished_before

        store, after = self._store(), ""
        while True:
            rows = finished_before(store, cutoff_ms=self.retention.widest(self.now_ms), lo=lo,
                                   hi=hi, after=after, limit=READ_CHUNK)
            for r in rows:
                if r[-1] < self.retention.cutoff(r[1], keyed=r[13] is not None,
                                                 now_ms=self.now_ms):
                    yield (*r[:3], bytes(r[3]), *r[4:], _day(r[-1]), self.now_ms)
            if len(rows) < READ_CHUNK:
                return
            after = rows[-1][0]

    def deliveries(self, owners: Iterable[Any]) -> Iterator[tuple[Any, ...]]:
        """The attempts (``DELIVERY_SCHEMA``) of archived schedules ``(id, tenant, channel,
        day)`` (on an executor)."""
        from tocsin.stores.sql.archive import archived_deliveries

        store = self._store()
        for chunk in _chunks(owners, DELETE_CHUNK):
            by_id = {o[0]: o for o in chunk}
            for d in archived_deliveries(store, list(by_id)):
                owner = by_id[d[1]]
                yield (*d, owner[1], owner[2], owner[3], self.now_ms)

    def delete(self, ids: Iterable[Any]) -> tuple[int, int]:
        """Delete archived schedules and their attempts, a chunk per transaction."""
        from tocsin.stores.sql.archive import delete_archived

        store, total = self._store(), (0, 0)
        cutoff = self.retention.widest(self.now_ms)
        for chunk in _chunks((row[0] for row in ids), DELETE_CHUNK):
            done = delete_archived(store, chunk, cutoff_ms=cutoff)
            total = (total[0] + done[0], total[1] + done[1])
        return total


def _day(ms: int) -> str:
    return datetime.fromtimestamp(ms // _DAY_MS * 86_400, UTC).strftime("%Y-%m-%d")


def _chunks(items: Iterable[Any], size: int) -> Iterator[list[Any]]:
    chunk: list[Any] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _write_checked(frame: DataFrame, path: str, expected: Any, what: str,
                   spark: SparkSession) -> int:
    """Write ``frame`` partitioned by day and tenant; its count as read back, which must
    equal the rows the tasks produced (``expected``, an accumulator)."""
    frame.write.mode("errorifexists").partitionBy("day", "tenant").parquet(path)
    produced = int(expected.value)
    if produced == 0:
        return 0
    found = spark.read.parquet(path).count()
    if found != produced:
        raise ArchiveCheckError(f"archive check failed: {what}: read {produced} rows from the "
                                f"store, {found} in {path}; nothing was deleted")
    return found


def run_archive(spark: SparkSession, *, settings: Settings, clock: Clock | None = None,
                partitions: int | None = None) -> dict[str, Any]:
    """Archive what finished before its retention and delete it from the store; the counts
    read, written and deleted, and where the files are."""
    started = time.monotonic()
    store = open_store(settings.store_url, buckets=settings.buckets)
    buckets = store.buckets
    store.close()
    now = (clock or SystemClock()).now_ms()
    job = ArchiveJob(store_url=settings.store_url, buckets=buckets, now_ms=now,
                     retention=Retention.from_settings(settings))
    sc = spark.sparkContext
    ranges = bucket_ranges(buckets, partitions or sc.defaultParallelism * 2)
    root = settings.archive_path.rstrip("/")
    paths = {t: f"{root}/{t}/run={now}" for t in ("schedules", "deliveries")}
    read = {t: sc.accumulator(0) for t in paths}

    def counted(rows: Iterable[tuple[Any, ...]], acc: Any) -> Iterator[tuple[Any, ...]]:
        for row in rows:
            acc.add(1)
            yield row

    schedules = spark.createDataFrame(
        sc.parallelize(ranges, len(ranges)).flatMap(lambda r: job.schedules(r[0], r[1]))
        .mapPartitions(lambda rows: counted(rows, read["schedules"])), SCHEDULE_SCHEMA)
    written = _write_checked(schedules, paths["schedules"], read["schedules"], "schedules",
                             spark)
    summary: dict[str, Any] = {"schedules": written, "deliveries": 0, "deleted_schedules": 0,
                               "deleted_deliveries": 0, "archive": root, "run": now}
    if written:
        archived = spark.read.parquet(paths["schedules"])
        # The day comes back as a partition column, which Spark reads as a date.
        owners = archived.selectExpr("id", "tenant", "channel", "CAST(day AS STRING)").rdd
        attempts = spark.createDataFrame(
            owners.mapPartitions(job.deliveries)
            .mapPartitions(lambda rows: counted(rows, read["deliveries"])), DELIVERY_SCHEMA)
        summary["deliveries"] = _write_checked(attempts, paths["deliveries"],
                                               read["deliveries"], "deliveries", spark)
        gone = archived.select("id").rdd.mapPartitions(
            lambda ids: iter([job.delete(ids)])).collect()
        summary["deleted_schedules"] = sum(g[0] for g in gone)
        summary["deleted_deliveries"] = sum(g[1] for g in gone)
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def start_archive_timer(spark: SparkSession, settings: Settings,
                        stop: threading.Event) -> threading.Thread | None:
    """Run :func:`run_archive` every ``archive_every_seconds`` (the first one interval after
    the start) on a daemon thread until ``stop`` is set; None when it is 0 (off)."""
    every = settings.archive_every_seconds
    if every <= 0:
        return None

    def loop() -> None:
        import logging

        log = logging.getLogger("tocsin.archive")
        while not stop.wait(every):
            try:
                log.info("archive: %s", run_archive(spark, settings=settings))
            except Exception:  # the next day's run tries again; dispatch goes on meanwhile
                log.exception("archive run failed")

    thread = threading.Thread(target=loop, name="tocsin-archive", daemon=True)
    thread.start()
    return thread

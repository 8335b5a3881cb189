"""``tocsin archive``: move finished schedules and their attempts out of the store, to Parquet.

A Spark batch job in four steps, each checked before the next:

1. **Read** (executors, one span of finish times per partition): finished schedules
   (DELIVERED, CANCELLED, DEAD, recurring firings among them) that finished before their
   tenant's retention, by a range of the ``schedules_finished`` index, a page at a time, as
   Arrow batches.
2. **Write** them to ``<archive>/schedules/run=<ms>/day=<finished day>/tenant=<t>/`` and
   read the files back: the count must equal what was read, or the job stops (nothing is
   deleted).
3. **Attempts** of exactly the written schedules (their ids read back from the files) go to
   ``<archive>/deliveries/run=<ms>/`` (same day and tenant as their schedule), counted the
   same way.
4. **Delete** the written schedules and their attempts from the store, a chunk of
   :data:`DELETE_CHUNK` per transaction, so dispatch and the API wait at most one small
   transaction. A schedule re-driven meanwhile is no longer finished and stays.

Task keys: a schedule with a key is kept at least ``task_key_retention_seconds`` (a completed
task key answers repeats that long), whatever its tenant's retention. A run that stops between
steps 2 and 4 leaves rows both archived and stored: the next run archives them again under its
own ``run=`` folder, so readers drop repeats by ``id`` (``tocsin report`` does).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.errors import TocsinError, ValidationError
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DELETE_CHUNK", "ArchiveJob", "Retention", "run_archive", "start_archive_timer"]

READ_CHUNK = 5_000
"""Schedules read per page."""
DELETE_CHUNK = 2_000
"""Schedules deleted per transaction (and whose attempts are read per statement)."""
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
_ARROW = {"string": pa.string(), "binary": pa.binary(), "long": pa.int64(), "int": pa.int32()}


def _arrow(schema: str) -> pa.Schema:
    return pa.schema([(name, _ARROW[kind]) for name, kind in
                      (column.split() for column in schema.split(", "))])


SCHEDULES, DELIVERIES = _arrow(SCHEDULE_SCHEMA), _arrow(DELIVERY_SCHEMA)
DELETED = pa.schema([("schedules", pa.int64()), ("deliveries", pa.int64())])


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
    """One archive run, picklable for the executors. Rows travel to Spark as Arrow batches."""

    store_url: str
    buckets: int
    now_ms: int
    retention: Retention

    def _store(self) -> Any:
        from tocsin.dispatcher.runtime import store_for

        return store_for(self.store_url, self.buckets)

    def slices(self, first_ms: int, count: int) -> list[tuple[int, int]]:
        """``[first_ms, widest cutoff)`` cut into ``count`` spans of time, one Spark partition
        each."""
        end = self.retention.widest(self.now_ms)
        width = max(1, -(-(end - first_ms) // max(1, count)))
        return [(lo, min(end, lo + width)) for lo in range(first_ms, end, width)]

    def schedules(self, spans: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The archived rows (``SCHEDULE_SCHEMA``) that finished in each span ``(lo, hi)``,
        a page at a time (on an executor)."""
        from tocsin.stores.sql.archive import finished_between

        store = self._store()
        cutoffs: dict[tuple[str, bool], int] = {}

        def cutoff(tenant: str, keyed: bool) -> int:
            if (tenant, keyed) not in cutoffs:
                cutoffs[(tenant, keyed)] = self.retention.cutoff(tenant, keyed=keyed,
                                                                 now_ms=self.now_ms)
            return cutoffs[(tenant, keyed)]

        for batch in spans:
            for lo, hi in zip(*(c.to_pylist() for c in batch.columns), strict=True):
                after: tuple[int, str] | None = None
                while True:
                    rows = finished_between(store, lo_ms=lo, hi_ms=hi, after=after,
                                            limit=READ_CHUNK)
                    kept = [r for r in rows if r[-1] < cutoff(r[1], r[13] is not None)]
                    if kept:
                        columns = [list(c) for c in zip(*kept, strict=True)]
                        columns[3] = [bytes(p) for p in columns[3]]
                        days = [_day(ms // _DAY_MS) for ms in columns[-1]]
                        yield _batch(SCHEDULES, [*columns, days, [self.now_ms] * len(kept)])
                    if len(rows) < READ_CHUNK:
                        break
                    after = (int(rows[-1][-1]), str(rows[-1][0]))

    def deliveries(self, owners: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """The attempts (``DELIVERY_SCHEMA``) of archived schedules (batches of ``id, tenant,
        channel, day``), on an executor."""
        from tocsin.stores.sql.archive import archived_deliveries

        store = self._store()
        for batch in owners:
            ids, tenants, channels, days = (c.to_pylist() for c in batch.columns)
            by_id = {i: (t, c, d) for i, t, c, d in zip(ids, tenants, channels, days,
                                                        strict=True)}
            for start in range(0, len(ids), DELETE_CHUNK):
                found = archived_deliveries(store, ids[start:start + DELETE_CHUNK])
                if not found:
                    continue
                columns = [list(c) for c in zip(*found, strict=True)]
                owner = [by_id[i] for i in columns[1]]
                yield _batch(DELIVERIES, [*columns, *(list(c) for c in zip(*owner, strict=True)),
                                          [self.now_ms] * len(found)])

    def delete(self, ids: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """Delete archived schedules and their attempts, a chunk per transaction; yields the
        counts (``schedules long, deliveries long``)."""
        from tocsin.stores.sql.archive import delete_archived

        store, total = self._store(), (0, 0)
        cutoff = self.retention.widest(self.now_ms)
        for batch in ids:
            column = batch.column(0).to_pylist()  # the files' order; sorting by id was slower
            for start in range(0, len(column), DELETE_CHUNK):
                done = delete_archived(store, column[start:start + DELETE_CHUNK],
                                       cutoff_ms=cutoff)
                total = (total[0] + done[0], total[1] + done[1])
        yield pa.RecordBatch.from_pydict({"schedules": [total[0]], "deliveries": [total[1]]},
                                         schema=DELETED)


@functools.cache
def _day(day: int) -> str:
    """The UTC day number ``day`` as ``YYYY-MM-DD``."""
    return datetime.fromtimestamp(day * 86_400, UTC).strftime("%Y-%m-%d")


def _batch(schema: pa.Schema, columns: list[list[Any]]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(c, type=f.type) for c, f in
                                       zip(columns, schema, strict=True)], schema=schema)


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


def _counted(make: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
             acc: Any) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in make(batches):
            acc.add(batch.num_rows)
            yield batch

    return run


def run_archive(spark: SparkSession, *, settings: Settings, clock: Clock | None = None,
                partitions: int | None = None) -> dict[str, Any]:
    """Archive what finished before its retention and delete it from the store; the counts
    read, written and deleted, and where the files are."""
    from tocsin.stores.sql.archive import first_finished
    from tocsin.stores.sql.base import SqlBase

    started = time.monotonic()
    store = open_store(settings.store_url, buckets=settings.buckets)
    try:
        if not isinstance(store, SqlBase):
            raise TypeError(f"{type(store).__name__} cannot be archived")
        buckets, first = store.buckets, first_finished(store)
    finally:
        store.close()
    now = (clock or SystemClock()).now_ms()
    job = ArchiveJob(store_url=settings.store_url, buckets=buckets, now_ms=now,
                     retention=Retention.from_settings(settings))
    sc = spark.sparkContext
    root = settings.archive_path.rstrip("/")
    summary: dict[str, Any] = {"schedules": 0, "deliveries": 0, "deleted_schedules": 0,
                               "deleted_deliveries": 0, "archive": root, "run": now}
    spans = job.slices(first, partitions or sc.defaultParallelism * 2) if first is not None else []
    if spans:
        _archive(spark, job, spans, root, summary)
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def _archive(spark: SparkSession, job: ArchiveJob, spans: list[tuple[int, int]], root: str,
             summary: dict[str, Any]) -> None:
    sc = spark.sparkContext
    paths = {t: f"{root}/{t}/run={job.now_ms}" for t in ("schedules", "deliveries")}
    read = {t: sc.accumulator(0) for t in paths}
    slices = spark.createDataFrame(sc.parallelize(spans, len(spans)), "lo long, hi long")
    schedules = slices.mapInArrow(_counted(job.schedules, read["schedules"]), SCHEDULE_SCHEMA)
    steps, mark = summary.setdefault("steps_seconds", {}), time.monotonic()

    def step(name: str) -> None:
        nonlocal mark
        steps[name], mark = round(time.monotonic() - mark, 3), time.monotonic()

    written = _write_checked(schedules, paths["schedules"], read["schedules"], "schedules",
                             spark)
    summary["schedules"] = written
    step("schedules")
    if not written:
        return
    archived = spark.read.parquet(paths["schedules"])
    # The day comes back as a partition column, which Spark reads as a date.
    owners = archived.selectExpr("id", "tenant", "channel", "CAST(day AS STRING) AS day")
    attempts = owners.mapInArrow(_counted(job.deliveries, read["deliveries"]), DELIVERY_SCHEMA)
    summary["deliveries"] = _write_checked(attempts, paths["deliveries"], read["deliveries"],
                                           "deliveries", spark)
    step("deliveries")
    gone = archived.select("id").mapInArrow(job.delete, "schedules long, deliveries long")
    counts = gone.groupBy().sum().collect()[0]
    summary["deleted_schedules"], summary["deleted_deliveries"] = (int(c or 0) for c in counts)
    step("delete")


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

"""``tocsin archive``: move finished schedules and their attempts out of the store, to Parquet.

A Spark batch job over spans of finish time, taken in :data:`ROUNDS` rounds, earliest first;
each round is checked before any of its rows is deleted:

1. **Archive** (one Spark job a round; executors, one span per partition): each task reads
   the finished schedules (DELIVERED, CANCELLED, DEAD, recurring firings among them) that
   finished in its span before their tenant's retention, by a range of the
   ``schedules_finished`` index, a page at a time, and the attempts of exactly those
   schedules (by id); it writes both with pyarrow as Parquet under its own task attempt's
   staging folder, split by the schedule's finish day and tenant, and returns only the list
   of its files. The driver moves the files of the attempts that succeeded to
   ``<archive>/{schedules,deliveries}/run=<ms>/day=<finished day>/tenant=<t>/`` (as Spark's
   partitioned writer lays them out) and has Spark read the round's files back: each count
   must equal what the tasks wrote, or the job stops (nothing of the round, or of a later
   one, is deleted). Writing in the tasks spares Spark turning every row into its own row
   format, sorting and encoding it: the job's largest cost before (docs/benchmarks.md).
2. **Delete** the round's schedules (their ids read back from its files) and their attempts
   from the store, a chunk of :data:`DELETE_CHUNK` per transaction, so dispatch and the API
   wait at most one small transaction. A schedule re-driven meanwhile is no longer finished
   and stays. The delete runs on a thread of the driver while the next round writes (the
   deletes one after the other; one Spark task on SQLite, which takes one writer at a time).

The archive's root is a local path or a URI pyarrow opens (``file://``, ``s3://`` — Hadoop's
``s3a://`` is read as S3 —, ``gs://``, ``hdfs://``, ``abfs://``).

Task keys: a schedule with a key is kept at least ``task_key_retention_seconds`` (a completed
task key answers repeats that long), whatever its tenant's retention. A run that stops between
steps 1 and 2 leaves rows both archived and stored: the next run archives them again under its
own ``run=`` folder, so readers drop repeats by ``id`` (``tocsin report`` does).
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.errors import TocsinError, ValidationError, first_line
from tocsin.pipelines.archive_timer import start_archive_timer
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["DELETE_CHUNK", "ROUNDS", "ArchiveJob", "Retention", "filesystem_of", "run_archive",
           "start_archive_timer"]

READ_CHUNK = 5_000
"""Schedules read per page."""
DELETE_CHUNK = 2_000
"""Schedules deleted per transaction (and whose attempts are read per statement)."""
FILE_ROWS = 200_000
"""Rows of one table, day and tenant that a task writes as one Parquet file."""
HELD_ROWS = 400_000
"""Rows a task holds at most before it writes every file it holds."""
MOVERS = 8
"""Files the driver moves into place at once when it publishes a round."""
ROUNDS = 4
"""The spans are archived in this many rounds, earliest first: each round is written,
published and checked, then deleted while the next round writes, so the delete (one writer's
work on SQLite) leaves no core idle."""
_DAY_MS = 86_400_000
SCHEDULE_SCHEMA = (
    "id string, tenant string, channel string, payload binary, payload_kind string, "
    "headers string, due_ms long, bucket int, status string, attempts int, created_ms long, "
    "delivered_ms long, last_error string, key string, ordering_key string, policy string, "
    "recurring_id string, firing_ms long, labels string, finished_ms long, day string, "
    "archived_ms long")
"""An archived schedule. ``labels`` (its labels as compact JSON, null for none) is in files
written since labels existed; a reader of older files too asks Spark to merge their schemas
(:func:`tocsin.pipelines.report._archived`)."""
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
MANIFEST_SCHEMA = "path string, rows long"
MANIFEST = _arrow(MANIFEST_SCHEMA)


class ArchiveCheckError(TocsinError):
    """The archive's files do not hold what was read: the rows of those files (and of the
    rounds after them) were not deleted."""


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
        from tocsin.spark.worker import store_for

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

    def attempts(self, schedules: pa.RecordBatch) -> Iterator[pa.RecordBatch]:
        """The attempts (``DELIVERY_SCHEMA``) of the archived ``schedules`` (a batch of
        ``SCHEDULE_SCHEMA``), looked up by id, a chunk of ids per statement (on an executor)."""
        from tocsin.stores.sql.archive import archived_deliveries

        store, ids = self._store(), schedules.column("id")
        listed = ids.to_pylist()
        for start in range(0, len(listed), DELETE_CHUNK):
            found = archived_deliveries(store, listed[start:start + DELETE_CHUNK])
            if not found:
                continue
            columns = [list(c) for c in zip(*found, strict=True)]
            at = pc.index_in(pa.array(columns[1], pa.string()), value_set=ids)
            owner = [schedules.column(name).take(at) for name in ("tenant", "channel", "day")]
            own = [pa.array(c, type=f.type) for c, f in zip(columns, DELIVERIES, strict=False)]
            yield pa.RecordBatch.from_arrays(
                [*own, *owner, pa.array([self.now_ms] * len(found), pa.int64())],
                schema=DELIVERIES)

    def archive(self, spans: Iterable[pa.RecordBatch], *, root: str) -> Iterator[pa.RecordBatch]:
        """Read each span's schedules and their attempts and write both to Parquet under this
        task attempt's staging folder (:class:`_Files`); yields the files written
        (``MANIFEST``), which the driver moves into place (on an executor)."""
        from pyspark import TaskContext

        context = TaskContext.get()
        attempt = context.taskAttemptId() if context is not None else 0
        fs, base = filesystem_of(root)
        files = _Files(fs, f"{_staging(base, self.now_ms)}/attempt={attempt}")
        for batch in self.schedules(spans):
            files.add("schedules", batch)
            for attempts in self.attempts(batch):
                files.add("deliveries", attempts)
        written = files.close()
        yield _batch(MANIFEST, [[path for path, _ in written], [rows for _, rows in written]])

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


class _Files:
    """One task's Parquet files under its staging folder: the rows of each (table, day,
    tenant), buffered and written as one file every :data:`FILE_ROWS` rows (and all of them
    once the task holds :data:`HELD_ROWS`), without the day and tenant columns, which the
    folders name (``day=…/tenant=…``) as Spark's partitioned writer names them."""

    def __init__(self, fs: Any, stage: str) -> None:
        self._fs, self._stage = fs, stage
        self._held: dict[tuple[str, str, str], list[pa.RecordBatch]] = {}
        self._rows: dict[tuple[str, str, str], int] = {}
        self._written: list[tuple[str, int]] = []

    def add(self, table: str, batch: pa.RecordBatch) -> None:
        """Hold ``batch`` (with ``day`` and ``tenant`` columns) for its days and tenants."""
        days, tenants = batch.column("day"), batch.column("tenant")
        body = batch.drop_columns(["day", "tenant"])
        joined = pc.binary_join_element_wise(days, tenants, "/")
        pairs = pc.unique(joined).to_pylist()
        for pair in pairs:
            part = body if len(pairs) == 1 else body.filter(pc.equal(joined, pair))
            day, tenant = pair.split("/")
            key = (table, day, tenant)
            self._held.setdefault(key, []).append(part)
            self._rows[key] = self._rows.get(key, 0) + part.num_rows
            if self._rows[key] >= FILE_ROWS:
                self._flush(key)
        if sum(self._rows.values()) >= HELD_ROWS:
            for key in list(self._held):
                self._flush(key)

    def _flush(self, key: tuple[str, str, str]) -> None:
        import pyarrow.parquet as pq

        table, day, tenant = key
        folder = f"{self._stage}/{table}/day={day}/tenant={tenant}"
        path = f"{folder}/part-{len(self._written):05d}.parquet"
        self._fs.create_dir(folder, recursive=True)
        pq.write_table(pa.Table.from_batches(self._held.pop(key)), path, filesystem=self._fs,
                       compression="snappy")
        self._written.append((path, self._rows.pop(key)))

    def close(self) -> list[tuple[str, int]]:
        """Write what is held; every file written: (path, rows). The path names the table,
        day and tenant (``<stage>/<table>/day=…/tenant=…/part-….parquet``)."""
        for key in list(self._held):
            self._flush(key)
        return self._written


def filesystem_of(root: str) -> tuple[Any, str]:
    """The pyarrow file system of ``root`` (the archive's, an imported file) and the path in
    it: a local path, or a URI pyarrow opens (``file://``, ``s3://`` — Hadoop's ``s3a://`` is
    read as S3 —, ``gs://``, ``hdfs://``, ``abfs://``)."""
    import os

    from pyarrow import fs

    if "://" not in root:
        return fs.LocalFileSystem(), os.path.abspath(root)
    scheme, rest = root.split("://", 1)
    uri = f"s3://{rest}" if scheme in ("s3a", "s3n") else root
    filesystem, path = fs.FileSystem.from_uri(uri)
    return filesystem, str(path)


def _staging(base: str, run: int) -> str:
    """Where the tasks of run ``run`` write before the driver moves their files into place."""
    return f"{base}/_staging-{run}"


def _published_run(fs: Any, base: str, run: int) -> None:
    """Refuse a run whose folder exists already: nothing is ever written over."""
    from pyarrow.fs import FileType

    for table in ("schedules", "deliveries"):
        if fs.get_file_info(f"{base}/{table}/run={run}").type != FileType.NotFound:
            raise ArchiveCheckError(f"{base}/{table}/run={run} exists already")


@dataclass(slots=True)
class _Moved:
    """A table's files moved into place (paths under the archive's root) and their rows."""

    files: list[str]
    rows: int = 0


def _publish(fs: Any, base: str, run: int, written: list[Any]) -> dict[str, _Moved]:
    """Move the files of the task attempts that succeeded (``written``: their manifests) from
    the staging folder to ``<table>/run=<run>/day=…/tenant=…``; each table's files. The moves
    run :data:`MOVERS` at a time: on an object store each is a copy."""
    from concurrent.futures import ThreadPoolExecutor

    stage = _staging(base, run)
    moved = {"schedules": _Moved([]), "deliveries": _Moved([])}
    moves: list[tuple[str, str]] = []
    for entry in written:
        relative = entry.path[len(stage) + 1:]           # attempt=<n>/<table>/day=…/tenant=…/…
        attempt, table, day, tenant, name = relative.split("/")
        target = f"{table}/run={run}/{day}/{tenant}/{attempt.split('=')[1]}-{name}"
        moves.append((entry.path, f"{base}/{target}"))
        moved[table].files.append(target)
        moved[table].rows += int(entry.rows)
    for folder in sorted({target.rsplit("/", 1)[0] for _, target in moves}):
        fs.create_dir(folder, recursive=True)
    with ThreadPoolExecutor(MOVERS, thread_name_prefix="tocsin-archive-move") as pool:
        for _ in pool.map(lambda move: fs.move(*move), moves):  # re-raises a failed move
            pass
    return moved


def _read_back(spark: SparkSession, root: str, files: list[str]) -> DataFrame:
    """The rows of ``files`` (paths under ``root``, all of one table) as Spark reads them."""
    table = files[0].split("/")[0]
    return spark.read.option("basePath", f"{root}/{table}").parquet(
        *(f"{root}/{f}" for f in files))


def _checked(spark: SparkSession, root: str, moved: _Moved, what: str) -> int:
    """The rows Spark reads back from the ``moved`` files, which must equal what the tasks
    wrote."""
    if not moved.rows:
        return 0
    table = moved.files[0].split("/")[0]
    try:
        found = _read_back(spark, root, moved.files).count()
    except Exception as exc:  # a file gone or unreadable: Spark's own error, first line
        raise ArchiveCheckError(f"archive check failed: {what}: {root}/{table} cannot be read "
                                f"back ({first_line(exc)}); the rows of those files were not "
                                "deleted") from exc
    if found != moved.rows:
        raise ArchiveCheckError(f"archive check failed: {what}: read {moved.rows} rows from "
                                f"the store, {found} in {root}/{table}; the rows of those "
                                "files were not deleted")
    return found


def run_archive(spark: SparkSession, *, settings: Settings, clock: Clock | None = None,
                partitions: int | None = None) -> dict[str, Any]:
    """Archive what finished before its retention and delete it from the store; the counts
    read, written and deleted, and where the files are. ``partitions``: Spark tasks (spans
    of finish time) per round, default Spark's parallelism."""
    from tocsin.stores.sql.archive import first_finished
    from tocsin.stores.sql.base import SqlBase

    if partitions is not None and partitions < 1:
        raise ValidationError("partitions", f"{partitions} is not 1 or more")
    started = time.monotonic()
    store = open_store(settings.store_url, buckets=settings.buckets)
    try:
        if not isinstance(store, SqlBase):
            raise TypeError(f"{type(store).__name__} cannot be archived")
        buckets, first = store.buckets, first_finished(store)
        one_writer = store._dialect.one_writer
    finally:
        store.close()
    now = (clock or SystemClock()).now_ms()
    job = ArchiveJob(store_url=settings.store_url, buckets=buckets, now_ms=now,
                     retention=Retention.from_settings(settings))
    per_round = partitions or spark.sparkContext.defaultParallelism
    root = settings.archive_path.rstrip("/")
    summary: dict[str, Any] = {"schedules": 0, "deliveries": 0, "deleted_schedules": 0,
                               "deleted_deliveries": 0, "archive": root, "run": now}
    spans = job.slices(first, per_round * ROUNDS) if first is not None else []
    if spans:
        _archive(spark, job, spans, root, summary, per_round=per_round, one_writer=one_writer)
    summary["audit"] = _archive_audit(settings, job, root)
    summary["seconds"] = round(time.monotonic() - started, 3)
    return summary


def _archive_audit(settings: Settings, job: ArchiveJob, root: str) -> int:
    """The audit log's entries past retention, archived beside the schedules
    (:mod:`tocsin.pipelines.archive_audit`)."""
    from tocsin.pipelines.archive_audit import archive_audit

    fs, base = filesystem_of(root)
    store = open_store(settings.store_url, buckets=settings.buckets)
    try:
        return archive_audit(store, job.retention, now_ms=job.now_ms, fs=fs, base=base)
    finally:
        store.close()


def _archive(spark: SparkSession, job: ArchiveJob, spans: list[tuple[int, int]], root: str,
             summary: dict[str, Any], *, per_round: int, one_writer: bool) -> None:
    """The rounds: each writes, publishes and checks its spans, then has its rows deleted on
    the deleter's thread while the next round writes; the deletes run one after the other, in
    as many tasks as a round writes (one on SQLite)."""
    from concurrent.futures import Future, ThreadPoolExecutor

    sc = spark.sparkContext
    fs, base = filesystem_of(root)
    _published_run(fs, base, job.now_ms)
    steps = summary.setdefault("steps_seconds", {"write": 0.0, "delete": 0.0})

    def delete(files: list[str]) -> tuple[int, int]:
        mark = time.monotonic()
        ids = _read_back(spark, root, files).select("id")
        ids = ids.coalesce(1 if one_writer else per_round)
        counts = ids.mapInArrow(job.delete, "schedules long, deliveries long") \
            .groupBy().sum().collect()[0]
        steps["delete"] = round(steps["delete"] + time.monotonic() - mark, 3)
        return int(counts[0] or 0), int(counts[1] or 0)

    deletes: list[Future[tuple[int, int]]] = []
    with ThreadPoolExecutor(1, thread_name_prefix="tocsin-archive-delete") as deleter:
        for start in range(0, len(spans), per_round):
            mark = time.monotonic()
            part = spans[start:start + per_round]
            try:
                written = spark.createDataFrame(sc.parallelize(part, len(part)),
                                                "lo long, hi long") \
                    .mapInArrow(functools.partial(job.archive, root=root),
                                MANIFEST_SCHEMA).collect()
                moved = _publish(fs, base, job.now_ms, written)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    fs.delete_dir(_staging(base, job.now_ms))
            for table in ("schedules", "deliveries"):
                summary[table] += _checked(spark, root, moved[table], table)
            steps["write"] = round(steps["write"] + time.monotonic() - mark, 3)
            if moved["schedules"].files:
                deletes.append(deleter.submit(delete, moved["schedules"].files))
            for done in [d for d in deletes if d.done()]:   # a failed delete stops the job
                done.result()
    for done in deletes:
        gone = done.result()
        summary["deleted_schedules"] += gone[0]
        summary["deleted_deliveries"] += gone[1]

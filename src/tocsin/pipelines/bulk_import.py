"""``tocsin import PATH``: a Spark batch job from files (JSON lines, CSV, Parquet; a file, a
folder, any path Spark reads) into the store, by the rules of ``POST /v1/schedules``.

Spark reads the files into partitions; on the executors each Arrow batch is checked and written
by :class:`~tocsin.pipelines.loader.Loader` (``mapInArrow``), which yields the rejected rows;
the job's one action writes those to the rejects folder as JSON lines. Counts travel back in
accumulators: the driver shows them as a progress bar while the job runs, and as the summary.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.errors import ValidationError, first_line
from tocsin.owner_only import make_owner_only
from tocsin.pipelines.loader import REJECT_FIELDS, ImportJob, Loader
from tocsin.pipelines.progress import Progress
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.accumulators import Accumulator
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ImportSummary", "run_import"]

SOURCE_COLUMN = "_tocsin_source"
REJECT_SCHEMA = pa.schema([(name, pa.string()) for name in REJECT_FIELDS])
_GROUP = "tocsin-import"
_JOB_CONF = {
    # Files cut in small splits: counts reach the driver as each task ends, so the progress
    # bar moves, and a retried task redoes little.
    "spark.sql.files.maxPartitionBytes": str(8 * 1024 * 1024),
    # Parquet timestamps in nanoseconds (pandas' unit) as numbers, which Spark otherwise
    # refuses to read; :func:`_read` makes them timestamps again.
    "spark.sql.legacy.parquet.nanosAsLong": "true",
}
_ROWS = ("created", "existing", "rejected")
"""What became of each row: the counts that add up to the rows."""
_COUNTS = (*_ROWS, "by_columns", "by_model")
_SPREAD = 4
"""Without ``--partitions``, an input of fewer splits than Spark's parallelism is spread over
up to this many partitions per core: all of them write, and the progress bar moves."""
_SPREAD_BYTES = 1024 * 1024
"""... and no more than one partition per this much input (a small file is not worth the
Python workers that more partitions start)."""
ORDER_FIELDS = ("due_at", "delay", "key")
"""The fields whose order is the store's order (:func:`in_store_order`): the indexes of due
times, and the index of keys (a derived key begins with its due time)."""
_SEQ = "_tocsin_seq"
_FIELDS = "_tocsin_order"


@dataclass(frozen=True, kw_only=True, slots=True)
class ImportSummary:
    """What an import did."""

    rows: int
    created: int
    existing: int
    """Rows whose key was already stored with the same request (a re-run): not created again."""
    rejected: int
    rejects: str
    """The folder holding the rejected rows (JSON lines: source, row, field, reason, errors)."""
    seconds: float
    rows_per_s: float
    partitions: int = 0
    """How many partitions (writers) the rows were loaded in."""
    by_columns: int = 0
    """Rows checked column by column (CSV, Parquet), the fast path."""
    by_model: int = 0
    """Rows checked by the API's model, the slow path: rows not plainly valid (mostly the
    rejected ones)."""
    rejected_by_field: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Why rows were refused, without opening the rejects folder: for each field named by a
    reject, most first, its ``rows`` and one of their reasons (``e.g.``)."""

    def to_dict(self) -> dict[str, Any]:
        """As plain values, for the CLI's summary."""
        return asdict(self)


class _Reasons:
    """The rules of the accumulator of rejects by field (Spark's ``AccumulatorParam``): a
    field's rows add up, its first reason seen is kept."""

    def zero(self, value: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
        return {}

    def addInPlace(self, into: dict[str, tuple[int, str]],
                   more: dict[str, tuple[int, str]]) -> dict[str, tuple[int, str]]:
        for name, (rows, reason) in more.items():
            had_rows, had_reason = into.get(name, (0, reason))
            into[name] = (had_rows + rows, had_reason)
        return into


def _by_field(rejects: list[dict[str, str]]) -> dict[str, tuple[int, str]]:
    """A batch's rejects as :class:`_Reasons` adds them up."""
    out: dict[str, tuple[int, str]] = {}
    for reject in rejects:
        rows, reason = out.get(reject["field"], (0, reject["reason"]))
        out[reject["field"]] = (rows + 1, reason)
    return out


def _uri(path: str) -> str:
    """``path`` as Spark names its files: a local path becomes an absolute ``file:`` URI."""
    if "://" in path or path.startswith("file:"):
        return path
    return Path(path).resolve().as_uri()


def _read(spark: SparkSession, path: str, fmt: SourceFormat) -> DataFrame:
    """The rows of ``path``; a path Spark cannot read (none there, an empty folder, files
    that are not ``fmt``) is a :class:`ValidationError` on ``path``."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        if fmt is SourceFormat.JSON:
            frame = spark.read.text(path)
        elif fmt is SourceFormat.CSV:
            frame = spark.read.option("header", "true").option("escape", '"').csv(path)
        else:
            frame = spark.read.parquet(path)
            for name, naive in _nanos(frame):
                micros = F.expr(f"timestamp_micros(div(`{name}`, 1000))")
                frame = frame.withColumn(name, micros.cast("timestamp_ntz") if naive
                                         else micros)
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            raise ValidationError("path", f"{path}: no such file or folder") from None
        raise ValidationError("path", f"{path} cannot be read as {fmt.value}: "
                                      f"{first_line(exc)}") from None
    return frame.withColumn(SOURCE_COLUMN, F.input_file_name())


def _nanos(frame: DataFrame) -> list[tuple[str, bool]]:
    """The columns of a Parquet read that are timestamps in nanoseconds (Spark reads them as
    numbers), each with whether it is naive; from the schema of its first file (none when
    pyarrow cannot open it)."""
    import pyarrow.parquet as pq

    from tocsin.pipelines.archive import filesystem_of

    files = frame.inputFiles()
    if not files:
        return []
    first = files[0]
    if first.startswith("file:") and not first.startswith("file://"):
        first = first.removeprefix("file:")
    try:
        filesystem, where = filesystem_of(first)
        schema = pq.read_schema(where, filesystem=filesystem)
    except (OSError, ValueError, pa.ArrowException):
        return []
    return [(field.name, field.type.tz is None) for field in schema
            if pa.types.is_timestamp(field.type) and field.type.unit == "ns"
            and field.name in frame.columns]


@contextmanager
def spark_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """The session's ``conf`` set while the block runs, then as it was."""
    before = {key: spark.conf.get(key, None) for key in conf}
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _writers(spark: SparkSession, frame: DataFrame, partitions: int | None, *,
             whole_files: bool = False) -> DataFrame:
    """``frame`` in ``partitions`` partitions, one writer each: fewer splits (one big Parquet
    file is one split per row group) are spread, more are merged. Without ``partitions``, the
    input's splits, spread when fewer than Spark's parallelism over up to :data:`_SPREAD`
    partitions a core, one per :data:`_SPREAD_BYTES` of input, rounded up to a multiple of
    the cores.

    ``whole_files``: the input is Parquet, whose row groups are not cut (pandas and pyarrow
    write one to a million rows), so a file of one row group that Spark reads in two splits
    holds its rows in one of them and leaves the other empty: its row groups, not its splits,
    say how many write (one 300 000-row file in random order, 4.5 MB, read in 2 splits:
    1 writer, 0.72 of the same rows in order, which fit one split and were spread over 4)."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import MapType

    splits = frame.rdd.getNumPartitions()
    if partitions is not None and splits > partitions:
        return frame.coalesce(partitions)
    cores = spark.sparkContext.defaultParallelism
    if whole_files:
        files = frame.inputFiles()
        if len(files) < splits:
            splits = min(splits, _row_groups(files))
    wanted = partitions
    if wanted is None:
        if splits >= cores:
            return frame
        try:
            size = int(frame._jdf.queryExecution().optimizedPlan().stats().sizeInBytes())
        except Exception:  # Spark's own estimate, an internal API: do without
            size = _SPREAD_BYTES * cores
        wanted = max(1, min(_SPREAD * cores, -(-size // _SPREAD_BYTES)))
        # Whole waves of tasks: 5 partitions on 2 cores ran the fifth alone (one_file,
        # 300 000 rows: 0.79-0.81 of the best shape).
        wanted = min(_SPREAD * cores, -(-wanted // cores) * cores)
    if splits >= wanted:
        return frame
    # Spread by a hash of the whole row: no sort (as a round robin has, to give a retried
    # task the same rows), the same partitions on a retry, and a row's repeats together.
    hashable = [F.col(f"`{field.name}`") for field in frame.schema.fields
                if not isinstance(field.dataType, MapType)]
    return frame.repartition(wanted, *hashable)


def _row_groups(files: list[str]) -> int:
    """How many row groups the Parquet ``files`` hold, from their footers (a few files: their
    splits outnumber them); a file that cannot be opened here counts as one."""
    import pyarrow.parquet as pq
    from pyarrow import fs

    groups = 0
    for uri in files:
        try:
            system, path = fs.FileSystem.from_uri(uri)
            with system.open_input_file(path) as source:
                groups += pq.ParquetFile(source).metadata.num_row_groups
        except Exception:  # a scheme pyarrow cannot reach from the driver: Spark still can
            groups += 1
    return max(groups, 1)


def in_store_order(frame: DataFrame, shape: RowShape, *,
                   ranges: int | None = None) -> DataFrame:
    """``frame`` with the rows of each partition in the order of the store's indexes: by due
    time (``due_at``, else ``delay``), then key, as far as the columns say (a JSON line's
    fields read for the sort alone); rows that tie keep their order in the partition. With
    ``ranges``, first in that many partitions, each a range of that order (``frame`` itself
    when the columns give no order).

    A user's export is rarely sorted by due time (by customer, by order id), and rows written
    in any order land all over the store's indexes of due times and keys: each chunk's
    transaction then changes a page of each index for nearly every row, where rows in due order
    share them (SQLite, 1 M rows over 30 days in random order: 12 185 rows/s against 37 135
    sorted). Sorted within its partition, a writer's chunks follow one another along the
    indexes whatever the file's order. Only the order of the writes changes: every row is
    checked and written as before, and a row's due time and key are its own.

    Sorted partitions of rows drawn at random over the whole range still land all over it:
    each writer's chunk of 10 000 rows spans the range its partition covers, and with eight
    partitions each covers all of it (SQLite, a million shuffled rows into 8 M: 17 000 rows/s,
    each chunk changing some 16 000 index pages). In ranges, each writer's chunks cover an
    eighth as much, and each page changed takes eight times the rows."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import (
        DateType,
        NumericType,
        StringType,
        StructField,
        StructType,
        TimestampNTZType,
        TimestampType,
    )

    columns = dict(shape.mapping)
    names = [columns.get(field, field) for field in ORDER_FIELDS]
    numbered = frame.withColumn(_SEQ, F.monotonically_increasing_id())
    made: list[str] = []
    if shape.format is SourceFormat.JSON:
        # Each key read once per row into a column of its own: a sort evaluates its keys at
        # every comparison, and a JSON line parsed there took 20 us a row (300 000 shuffled
        # lines: 7 332 rows/s against 37 591 in order); a delay's text cast there too, and
        # fields taken from a struct: a million shuffled lines' ranges and sort took 5.1-5.8 s
        # of the JVM's time, against 4.4-5.2 s with plain columns.
        read = StructType([StructField(name, StringType()) for name in names])
        parsed = F.col(_FIELDS)
        columns_of = {f"{_FIELDS}_due_at": parsed[names[0]],
                      f"{_FIELDS}_delay_s": parsed[names[1]].try_cast("double"),
                      f"{_FIELDS}_delay": parsed[names[1]], f"{_FIELDS}_key": parsed[names[2]]}
        made = list(columns_of)
        numbered = numbered.withColumn(_FIELDS, F.from_json(F.col("value"), read)).withColumns(
            columns_of).drop(_FIELDS)
        keys = [F.col(name) for name in made]
    else:
        sortable = (StringType, NumericType, TimestampType, TimestampNTZType, DateType)
        types = {field.name: field.dataType for field in frame.schema.fields}
        keys = [F.col(f"`{name}`") for name in names
                if isinstance(types.get(name), sortable)]
    if not keys:
        return frame
    if ranges:
        numbered = numbered.repartitionByRange(ranges, *keys, F.col(_SEQ))
    return numbered.sortWithinPartitions(*keys, F.col(_SEQ)).drop(_SEQ, *made)


def run_import(spark: SparkSession, path: str, *, settings: Settings,
               fmt: SourceFormat | None = None, shape: RowShape | None = None,
               rejects: str | None = None, partitions: int | None = None,
               show_progress: bool = False, clock: Clock | None = None) -> ImportSummary:
    """Import ``path`` into ``settings.store_url``; rejected rows go to ``rejects`` (default
    ``home/rejects/import-<now>``). The rows are loaded in ``partitions`` partitions, one
    writer each, however many files they come in (default: the input's splits, and at least
    Spark's parallelism)."""
    clock = clock or SystemClock()
    now_ms = clock.now_ms()
    fmt = fmt or SourceFormat.of(path)
    shape = RowShape(format=fmt, mapping=shape.mapping if shape else (),
                     tenant=shape.tenant if shape else None,
                     max_depth=settings.max_json_depth, zone=shape.zone if shape else None)
    rejects = rejects or str(settings.home / "rejects" / f"import-{now_ms}")
    with spark_conf(spark, _JOB_CONF):
        frame = _read(spark, path, fmt)  # a path that cannot be read touches no store
        store = open_store(settings.store_url, buckets=settings.buckets)  # creates, migrates
        try:
            job = ImportJob(store_url=settings.store_url, buckets=store.buckets,
                            settings=settings, now_ms=now_ms, shape=shape, root=_uri(path),
                            clock=clock)
        finally:
            store.close()
        return _run(spark, path, frame, job, rejects=rejects, partitions=partitions,
                    show_progress=show_progress)


def _run(spark: SparkSession, path: str, frame: DataFrame, job: ImportJob, *, rejects: str,
         partitions: int | None, show_progress: bool) -> ImportSummary:
    fmt = job.shape.format
    spread = _writers(spark, frame, partitions, whole_files=fmt is SourceFormat.PARQUET)
    writers = spread.rdd.getNumPartitions()
    # The writers' partitions as ranges of the store's order when the columns give one, else
    # as spread (the plan of ``spread`` is only asked its partitions: it runs in neither case
    # where the other does).
    ordered = in_store_order(frame, job.shape, ranges=writers) if writers > 1 else frame
    frame = in_store_order(spread, job.shape) if ordered is frame else ordered
    sc = spark.sparkContext
    counts = {name: sc.accumulator(0) for name in _COUNTS}
    # _Reasons has AccumulatorParam's methods: pyspark is not imported to load this module
    reasons: Accumulator[dict[str, tuple[int, str]]] = sc.accumulator(
        {}, _Reasons())  # type: ignore[arg-type]

    def load(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from tocsin.spark.worker import store_for

        loader = Loader(job, store_for(job.store_url, job.buckets))
        for batch in batches:
            sources = batch.column(SOURCE_COLUMN).to_pylist()
            if fmt is SourceFormat.JSON:
                lines = batch.column("value").to_pylist()
                tally = loader.load(list(zip(lines, sources, strict=True)))
            else:
                tally = loader.load_batch(batch.drop_columns([SOURCE_COLUMN]), sources)
            for name in _COUNTS:
                counts[name].add(getattr(tally, name))
            if tally.rejects:
                reasons.add(_by_field(tally.rejects))
            yield pa.RecordBatch.from_pylist(tally.rejects, schema=REJECT_SCHEMA)
        # The chunks committed without waiting for the flush: one commit that waits makes
        # them durable before the task ends (its counts reach the driver only then).
        loader.finish()

    out = frame.mapInArrow(load, ", ".join(f"{n} string" for n in REJECT_FIELDS))
    started = time.monotonic()
    done = threading.Event()
    failure: list[BaseException] = []

    def action() -> None:
        try:
            sc.setJobGroup(_GROUP, f"tocsin import {path}")
            out.write.mode("overwrite").json(rejects)
            make_owner_only(rejects)  # the rows as sent: tenants' data
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=action, name="tocsin-import", daemon=True)
    worker.start()
    values = {name: lambda acc=counts[name]: int(acc.value) for name in _ROWS}
    with Progress(sc, _GROUP, values, enabled=show_progress) as bar:
        while not done.wait(0.25):
            bar.update()
        worker.join()
        if failure:
            raise failure[0]
        bar.finish()
    store = open_store(job.store_url, buckets=job.buckets)
    try:
        # Once, now that the rows are in (the writers leave them stale while new keys
        # need no lookup): the next lookups of keys and the dispatcher's claims plan with
        # them.
        store.refresh_statistics(when_stale=True)
    finally:
        store.close()
    seconds = time.monotonic() - started
    got = {name: int(acc.value) for name, acc in counts.items()}
    rows = sum(got[name] for name in _ROWS)
    why = sorted(reasons.value.items(), key=lambda item: (-item[1][0], item[0]))
    return ImportSummary(rows=rows, rejects=rejects, seconds=round(seconds, 3),
                         rows_per_s=round(rows / seconds, 1) if seconds > 0 else 0.0,
                         partitions=writers, **got, rejected_by_field={
                             name: {"rows": count, "e.g.": reason}
                             for name, (count, reason) in why})

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
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.errors import ValidationError, first_line
from tocsin.pipelines.loader import REJECT_FIELDS, ImportJob, Loader
from tocsin.pipelines.progress import Progress
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ImportSummary", "run_import"]

SOURCE_COLUMN = "_tocsin_source"
REJECT_SCHEMA = pa.schema([(name, pa.string()) for name in REJECT_FIELDS])
_GROUP = "tocsin-import"
_SPLIT_CONF = "spark.sql.files.maxPartitionBytes"
_SPLIT_BYTES = str(8 * 1024 * 1024)


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

    def to_dict(self) -> dict[str, Any]:
        """As plain values, for the CLI's summary."""
        return asdict(self)


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
    except AnalysisException as exc:
        if exc.getCondition() == "PATH_NOT_FOUND":
            raise ValidationError("path", f"{path}: no such file or folder") from None
        raise ValidationError("path", f"{path} cannot be read as {fmt.value}: "
                                      f"{first_line(exc)}") from None
    return frame.withColumn(SOURCE_COLUMN, F.input_file_name())


@contextmanager
def _small_splits(spark: SparkSession) -> Iterator[None]:
    """Files cut in small splits while the job runs: counts reach the driver as each task
    ends, so the progress bar moves, and a retried task redoes little."""
    before = spark.conf.get(_SPLIT_CONF)
    spark.conf.set(_SPLIT_CONF, _SPLIT_BYTES)
    try:
        yield
    finally:
        if before is not None:
            spark.conf.set(_SPLIT_CONF, before)


def run_import(spark: SparkSession, path: str, *, settings: Settings,
               fmt: SourceFormat | None = None, shape: RowShape | None = None,
               rejects: str | None = None, partitions: int | None = None,
               show_progress: bool = False, clock: Clock | None = None) -> ImportSummary:
    """Import ``path`` into ``settings.store_url``; rejected rows go to ``rejects`` (default
    ``home/rejects/import-<now>``). ``partitions`` caps the concurrent writers (a SQLite file
    has one writer at a time: a few partitions suffice)."""
    clock = clock or SystemClock()
    now_ms = clock.now_ms()
    fmt = fmt or SourceFormat.of(path)
    shape = RowShape(format=fmt, mapping=shape.mapping if shape else (),
                     tenant=shape.tenant if shape else None)
    rejects = rejects or str(settings.home / "rejects" / f"import-{now_ms}")
    with _small_splits(spark):
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
    if partitions is not None and frame.rdd.getNumPartitions() > partitions:
        frame = frame.coalesce(partitions)
    sc = spark.sparkContext
    counts = {name: sc.accumulator(0) for name in ("created", "existing", "rejected")}

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
            counts["created"].add(tally.created)
            counts["existing"].add(tally.existing)
            counts["rejected"].add(tally.rejected)
            yield pa.RecordBatch.from_pylist(tally.rejects, schema=REJECT_SCHEMA)

    out = frame.mapInArrow(load, ", ".join(f"{n} string" for n in REJECT_FIELDS))
    started = time.monotonic()
    done = threading.Event()
    failure: list[BaseException] = []

    def action() -> None:
        try:
            sc.setJobGroup(_GROUP, f"tocsin import {path}")
            out.write.mode("overwrite").json(rejects)
        except BaseException as exc:  # re-raised on the caller's thread
            failure.append(exc)
        finally:
            done.set()

    worker = threading.Thread(target=action, name="tocsin-import", daemon=True)
    worker.start()
    values = {name: lambda acc=acc: int(acc.value) for name, acc in counts.items()}
    with Progress(sc, _GROUP, values, enabled=show_progress) as bar:
        while not done.wait(0.25):
            bar.update()
    worker.join()
    if failure:
        raise failure[0]
    seconds = time.monotonic() - started
    created, existing, rejected = (int(counts[n].value) for n in ("created", "existing",
                                                                    "rejected"))
    rows = created + existing + rejected
    return ImportSummary(rows=rows, created=created, existing=existing, rejected=rejected,
                         rejects=rejects, seconds=round(seconds, 3),
                         rows_per_s=round(rows / seconds, 1) if seconds > 0 else 0.0)

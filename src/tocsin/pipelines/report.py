"""``tocsin report --since 7d``: delivery analytics over the store and the archive, on Spark.

Per tenant, channel and hour: delivered, dead and cancelled schedules (by the hour they
finished), retried attempts, lateness p50/p95/p99/max of the delivered attempts (nearest
rank, ``percentile_disc``) and the SLA misses among them (lateness above ``--sla``); the same
per tenant and channel over the whole period; and what falls due in the next 24 hours (an
overdue schedule counts in the first hour). The store is read in time slices, one Spark
partition each, by index ranges; the archive's Parquet (``tocsin archive``) is read for the
same period, and a row found in both, or archived twice, counts once. ``--label k=v`` limits
it to the schedules carrying a label selector (and their attempts), in the store and in the
archive's files that keep labels (those written since labels existed).

Written as ``report.json`` and ``report.html`` (plots: :mod:`tocsin.pipelines.report_html`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tocsin.clock import Clock, SystemClock
from tocsin.config import Settings
from tocsin.errors import ValidationError
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

__all__ = ["ReportJob", "run_report", "time_slices"]

HOUR_MS = 3_600_000
AHEAD_MS = 24 * HOUR_MS
FINISHED_SCHEMA = "id string, tenant string, channel string, status string, finished_ms long"
ATTEMPT_SCHEMA = ("delivery_id string, schedule_id string, tenant string, channel string, "
                  "ended_ms long, outcome string, lateness_ms long")
UPCOMING_SCHEMA = "tenant string, channel string, next_ms long"


def time_slices(lo_ms: int, hi_ms: int, parts: int) -> list[tuple[int, int]]:
    """``[lo_ms, hi_ms)`` cut into at most ``parts`` contiguous half-open slices."""
    parts = max(1, min(parts, hi_ms - lo_ms))
    edges = [lo_ms + (hi_ms - lo_ms) * i // parts for i in range(parts + 1)]
    return [(edges[i], edges[i + 1]) for i in range(parts)]


@dataclass(frozen=True, kw_only=True, slots=True)
class ReportJob:
    """The reads of one report, picklable for the executors."""

    store_url: str
    buckets: int
    labels: tuple[tuple[str, str], ...] = ()
    """A label selector's pairs: only the schedules carrying every one (and their attempts)."""

    def read(self, what: str, lo: int, hi: int) -> list[tuple[Any, ...]]:
        """Rows of ``what`` (finished, attempts, upcoming) in ``[lo, hi)`` (on an executor)."""
        from tocsin.spark.worker import store_for
        from tocsin.stores.sql import history

        reader = getattr(history, f"{what}_between")
        return [tuple(r) for r in reader(store_for(self.store_url, self.buckets), lo, hi,
                                         self.labels)]


def _from_store(spark: SparkSession, job: ReportJob, what: str, schema: str,
                slices: list[tuple[int, int]]) -> DataFrame:
    rdd = spark.sparkContext.parallelize(slices, len(slices)).flatMap(
        lambda s: job.read(what, s[0], s[1]))
    return spark.createDataFrame(rdd, schema)


def _archived(spark: SparkSession, root: str, table: str, columns: str, time_col: str,
              since_ms: int, *, labelled: DataFrame | None = None) -> DataFrame | None:
    """The archive's ``table`` from ``since_ms`` on (None: no archive yet); ``labelled``:
    only the rows whose ``id`` (``schedule_id`` for attempts) it holds."""
    from pyspark.errors import AnalysisException

    try:
        frame = spark.read.parquet(f"{root}/{table}")
    except AnalysisException:  # no archive yet
        return None
    frame = frame.where(frame[time_col] >= since_ms)
    if labelled is not None:
        key = "id" if table == "schedules" else "schedule_id"
        frame = frame.join(labelled.withColumnRenamed("id", key), key, "left_semi")
    return frame.selectExpr(*columns.split(", "))


def _archived_carrying(spark: SparkSession, root: str,
                       labels: tuple[tuple[str, str], ...]) -> DataFrame | None:
    """The ids of the archived schedules carrying every one of ``labels`` (the archive's
    files are read with their schemas merged: those written before labels existed have no
    ``labels`` column, and carry none)."""
    from pyspark.errors import AnalysisException
    from pyspark.sql import functions as F

    try:
        frame = spark.read.option("mergeSchema", "true").parquet(f"{root}/schedules")
    except AnalysisException:  # no archive yet
        return None
    if "labels" not in frame.columns:
        return frame.select("id").where(F.lit(False))
    pairs = F.from_json(F.col("labels"), "map<string,string>")
    for key, value in labels:
        frame = frame.where(pairs.getItem(key) == F.lit(value))
    return frame.select("id")


def _figures(spark: SparkSession, sla_ms: int, now_ms: int) -> dict[str, list[dict[str, Any]]]:
    """The report's tables from the views ``finished``, ``attempts`` and ``upcoming``."""
    late = ("CAST(percentile_disc({p}) WITHIN GROUP (ORDER BY lateness_ms) "
            "FILTER (WHERE outcome = 'delivered') AS BIGINT)")
    measures = (f"{late.format(p=0.5)} AS lateness_p50, {late.format(p=0.95)} AS lateness_p95, "
                f"{late.format(p=0.99)} AS lateness_p99, "
                "max(lateness_ms) FILTER (WHERE outcome = 'delivered') AS lateness_max, "
                "count_if(outcome = 'retry') AS retried, "
                f"count_if(outcome = 'delivered' AND lateness_ms > {int(sla_ms)}) AS sla_misses")
    outcomes = ("count_if(status = 'DELIVERED') AS delivered, count_if(status = 'DEAD') AS dead,"
                " count_if(status = 'CANCELLED') AS cancelled")
    out: dict[str, list[dict[str, Any]]] = {}
    for name, key, hour in (("hours", "tenant, channel, hour", True),
                            ("totals", "tenant, channel", False)):
        bucket = "CAST({t} DIV 3600000 * 3600000 AS BIGINT) AS hour, " if hour else ""
        sql = (f"SELECT {key}, coalesce(delivered, 0) AS delivered, coalesce(dead, 0) AS dead, "
               "coalesce(cancelled, 0) AS cancelled, coalesce(retried, 0) AS retried, "
               "coalesce(sla_misses, 0) AS sla_misses, lateness_p50, lateness_p95, "
               "lateness_p99, lateness_max FROM "
               f"(SELECT tenant, channel, {bucket.format(t='finished_ms')}{outcomes} "
               f"FROM finished GROUP BY {key}) f FULL OUTER JOIN "
               f"(SELECT tenant, channel, {bucket.format(t='ended_ms')}{measures} "
               f"FROM attempts GROUP BY {key}) a USING ({key}) ORDER BY {key}")
        out[name] = [r.asDict() for r in spark.sql(sql).collect()]
    out["upcoming"] = [r.asDict() for r in spark.sql(
        f"SELECT tenant, channel, CAST(greatest(next_ms, {int(now_ms)}) DIV 3600000 * 3600000 "
        "AS BIGINT) AS hour, count(*) AS due FROM upcoming GROUP BY 1, 2, 3 "
        "ORDER BY 1, 2, 3").collect()]
    return out


def run_report(spark: SparkSession, *, settings: Settings, since_ms: int, sla_ms: int,
               out_dir: str | Path, clock: Clock | None = None,
               partitions: int | None = None, label: str | None = None) -> dict[str, Any]:
    """Compute the report for ``[now - since_ms, now)`` and write ``report.json`` and
    ``report.html`` to ``out_dir``; the report's figures. ``label``: a selector
    ``k=v[,k2=v2]``, the figures of the schedules carrying it (and of their attempts)."""
    from tocsin.domain.labels import parse_selector

    labels = parse_selector(label)
    if since_ms <= 0:
        raise ValidationError("since", "must be positive")
    if sla_ms < 0:
        raise ValidationError("sla", "must be 0 or more")
    if partitions is not None and partitions < 1:
        raise ValidationError("partitions", f"{partitions} is not 1 or more")
    started = time.monotonic()
    store = open_store(settings.store_url, buckets=settings.buckets)
    job = ReportJob(store_url=settings.store_url, buckets=store.buckets, labels=labels)
    store.close()
    now = (clock or SystemClock()).now_ms()
    since = now - since_ms
    parts = partitions or spark.sparkContext.defaultParallelism * 2
    past, ahead = time_slices(since, now, parts), time_slices(now, now + AHEAD_MS, parts)
    root = settings.archive_path.rstrip("/")
    finished = _from_store(spark, job, "finished", FINISHED_SCHEMA, past)
    attempts = _from_store(spark, job, "attempts", ATTEMPT_SCHEMA, past)
    # By label: the archived rows of the archived schedules carrying it (None: no archive,
    # which the reads below find too).
    labelled = _archived_carrying(spark, root, labels) if labels else None
    archived = _archived(spark, root, "schedules", "id, tenant, channel, status, finished_ms",
                         "finished_ms", since, labelled=labelled)
    if archived is not None:
        finished = finished.unionByName(archived)
    archived = _archived(
        spark, root, "deliveries", ATTEMPT_SCHEMA.replace(" string", "").replace(" long", ""),
        "ended_ms", since, labelled=labelled)
    if archived is not None:
        attempts = attempts.unionByName(archived)
    finished.where(f"finished_ms < {now}").dropDuplicates(["id"]).createOrReplaceTempView(
        "finished")
    attempts.where(f"ended_ms < {now}").dropDuplicates(["delivery_id"]).createOrReplaceTempView(
        "attempts")
    first = [(0, ahead[0][1]), *ahead[1:]]  # the first slice also holds what is overdue
    _from_store(spark, job, "upcoming", UPCOMING_SCHEMA, first).createOrReplaceTempView(
        "upcoming")
    figures = _figures(spark, sla_ms, now)
    report = {"since_ms": since, "until_ms": now, "sla_ms": sla_ms, **figures}
    if labels:
        report["label"] = ",".join(f"{k}={v}" for k, v in labels)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True))
    from tocsin.pipelines.report_html import render

    (out / "report.html").write_text(render(report))
    report["seconds"] = round(time.monotonic() - started, 3)
    return report

"""Rows in any order: an import of a file whose rows are shuffled stores exactly what the same
rows in due order store, on each store (the job writes each partition in the store's order,
:func:`tocsin.pipelines.bulk_import.in_store_order`; only the order of the writes changes)."""

from __future__ import annotations

import csv
import json
import random
from collections.abc import Callable, Iterator
from itertools import pairwise
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.pipelines.data import read_rejects
from tocsin.clock import ManualClock, from_ms
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Status
from tocsin.pipelines.bulk_import import in_store_order, run_import
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NOW_MS = 1_800_000_000_000
DAY_MS = 86_400_000
COLUMNS = ("channel", "payload", "due_at", "delay", "key", "ordering_key")


@pytest.fixture(params=["sqlite", "postgres"])
def fresh_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], str]]:
    """Makes a new empty store (with channel ``out``) on each backend, each call."""
    made: list[str] = []

    def fresh() -> str:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / f'store-{len(made)}.db'}"
        else:
            from tocsin.testing.postgres import create_schema

            url = create_schema(request.getfixturevalue("postgres_url"))
        store = open_store(url, buckets=16)
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
        store.close()
        made.append(url)
        return url

    yield fresh
    if request.param == "postgres":
        from tocsin.testing.postgres import drop_schema

        for url in made:
            drop_schema(request.getfixturevalue("postgres_url"), url)


_row = st.fixed_dictionaries({
    "due": st.integers(0, 30 * DAY_MS),  # due over 30 days
    "by_delay": st.booleans(),
    "keyed": st.booleans(),
    "ordering_key": st.sampled_from([None, None, "a", "b"]),
    "bad": st.sampled_from([False] * 9 + [True]),  # an unknown channel: rejected
})


def _rows(drawn: list[dict[str, Any]], repeats: list[int]) -> list[dict[str, Any]]:
    """Rows ``n`` of ``drawn`` (payload ``{"n": n}``), and again those at ``repeats``: an
    identical row twice is one schedule, found again."""
    rows = []
    for n, d in enumerate(drawn):
        row: dict[str, Any] = {
            "channel": "nowhere" if d["bad"] else "out", "payload": json.dumps({"n": n}),
            "due_at": None if d["by_delay"] else from_ms(NOW_MS + 60_000 + d["due"]).isoformat(),
            "delay": float(60 + d["due"] // 1000) if d["by_delay"] else None,
            "key": f"order-{n}" if d["keyed"] else None, "ordering_key": d["ordering_key"]}
        rows.append(row)
    return rows + [rows[at % len(rows)] for at in repeats]


def _write(folder: Path, fmt: SourceFormat, rows: list[dict[str, Any]]) -> Path:
    """``rows`` as one file of ``fmt`` named alike in every folder (a derived key digests the
    file's name)."""
    folder.mkdir(parents=True)
    if fmt is SourceFormat.PARQUET:
        path = folder / "rows.parquet"
        types = {"delay": pa.float64()}
        pq.write_table(pa.table({c: pa.array([r[c] for r in rows], types.get(c, pa.string()))
                                 for c in COLUMNS}), path, row_group_size=max(1, len(rows)))
    elif fmt is SourceFormat.CSV:
        path = folder / "rows.csv"
        with path.open("w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(COLUMNS)
            for r in rows:
                writer.writerow(["" if r[c] is None else
                                 (int(r[c]) if c == "delay" else r[c]) for c in COLUMNS])
    else:
        path = folder / "rows.jsonl"
        path.write_text("".join(json.dumps(
            {c: (json.loads(r[c]) if c == "payload" else r[c]) for c in COLUMNS
             if r[c] is not None}) + "\n" for r in rows))
    return path


def _stored(url: str) -> list[tuple[Any, ...]]:
    """Every schedule of the store as what a user sees of it (no ids, no creation times)."""
    store = open_store(url, buckets=16)
    try:
        out, after = [], None
        while page := store.list_schedules(status=Status.PENDING, after_id=after, limit=1_000):
            out.extend((s.tenant, s.channel, s.payload, s.due_ms, s.key, s.ordering_key,
                        s.policy, tuple(sorted(s.headers.items()))) for s in page)
            after = page[-1].id
        return sorted(out)
    finally:
        store.close()


def _imported(spark: SparkSession, url: str, path: Path, fmt: SourceFormat,
              tmp: Path) -> tuple[tuple[int, int, int], list[tuple[Any, ...]], list[Any]]:
    summary = run_import(spark, str(path), settings=Settings(store=url, home=tmp, buckets=16),
                         shape=RowShape(format=fmt), partitions=3,
                         rejects=str(tmp / f"rejects-{path.parent.name}"),
                         clock=ManualClock(NOW_MS))
    rejects = sorted((r["field"], r["reason"], json.dumps(json.loads(r["row"]), sort_keys=True)
                      if fmt is SourceFormat.JSON else r["row"])
                     for r in read_rejects(summary.rejects))
    return (summary.created, summary.existing, summary.rejected), _stored(url), rejects


@settings(max_examples=4, deadline=None, phases=[Phase.explicit, Phase.reuse, Phase.generate],
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(drawn=st.lists(_row, min_size=1, max_size=80), repeats=st.lists(st.integers(0, 79),
                                                                       max_size=5),
       fmt=st.sampled_from(list(SourceFormat)), seed=st.integers(0, 2**32 - 1))
def test_shuffled_rows_store_the_same_schedules_as_rows_in_due_order(
        spark: SparkSession, fresh_store: Callable[[], str], tmp_path_factory: Any,
        drawn: list[dict[str, Any]], repeats: list[int], fmt: SourceFormat, seed: int) -> None:
    rows = _rows(drawn, repeats)
    in_order = sorted(rows, key=lambda r: (r["due_at"] is None, r["due_at"] or "",
                                           r["delay"] or 0.0))
    mixed = rows[:]
    random.Random(seed).shuffle(mixed)
    tmp = tmp_path_factory.mktemp("order")
    first = _imported(spark, fresh_store(), _write(tmp / "sorted", fmt, in_order), fmt, tmp)
    second = _imported(spark, fresh_store(), _write(tmp / "shuffled", fmt, mixed), fmt, tmp)
    assert second == first
    counts, stored, rejects = first
    assert sum(counts) == len(rows) and len(stored) == counts[0]
    assert len(rejects) == counts[2] == sum(1 for r in rows if r["channel"] == "nowhere")


def _random_rows(rng: random.Random, count: int) -> list[dict[str, Any]]:
    """``count`` rows due at random over 30 days, each with a random key."""
    return [{"channel": "out", "payload": json.dumps({"n": n}),
             "due_at": from_ms(NOW_MS + rng.randrange(30 * DAY_MS)).isoformat(),
             "delay": None, "key": f"k-{rng.randrange(10**6):06d}", "ordering_key": None}
            for n in range(count)]


def test_each_writer_gets_its_rows_in_due_then_key_order(spark: SparkSession,
                                                         tmp_path: Path) -> None:
    """What the writers are handed: in each partition, the rows by due time, then key; rows
    that tie (identical rows) in their order in the partition; no row lost or added."""
    from pyspark.sql import functions as F

    rows = _random_rows(random.Random(7), 2_000)
    path = _write(tmp_path / "in", SourceFormat.PARQUET, rows)
    frame = spark.read.parquet(str(path)).repartition(3)
    seen = in_store_order(frame, RowShape(format=SourceFormat.PARQUET)).withColumn(
        "part", F.spark_partition_id()).collect()
    assert sorted(r["payload"] for r in seen) == sorted(r["payload"] for r in rows)
    for part in {r["part"] for r in seen}:
        mine = [(r["due_at"], r["key"]) for r in seen if r["part"] == part]
        assert mine == sorted(mine)

    lines = tmp_path / "in.jsonl"
    lines.write_text("".join(json.dumps({"channel": "out", "payload": {"n": n}, **(
        {"delay": 3600 - n} if n % 2 else {"due_at": from_ms(NOW_MS + DAY_MS - n).isoformat()})})
        + "\n" for n in range(200)))
    texts = spark.read.text(str(lines)).coalesce(1)
    got = [json.loads(r["value"])["payload"]["n"] for r in
           in_store_order(texts, RowShape(format=SourceFormat.JSON)).collect()]
    # no due_at first, by delay (a delay's derived key, import:d..., comes before
    # import:t...), then by due_at, earliest first
    assert got[:100] == sorted(range(1, 200, 2), reverse=True)
    assert got[100:] == sorted(range(0, 200, 2), reverse=True)


def test_a_parquet_file_of_one_row_group_is_spread_over_the_writers(spark: SparkSession,
                                                                     tmp_path: Path) -> None:
    """A row group is not cut: a file of one that Spark reads in several splits has all its
    rows in one of them. The writers are counted by row groups, so its rows still spread."""
    from tocsin.pipelines.bulk_import import _writers, spark_conf

    path = tmp_path / "one.parquet"
    pq.write_table(pa.table({"channel": ["out"] * 4_000,
                             "payload": [json.dumps({"n": n}) for n in range(4_000)]}),
                   path, row_group_size=4_000)
    small = {"spark.sql.files.maxPartitionBytes": "4096", "spark.sql.files.openCostInBytes": "0"}
    with spark_conf(spark, small):
        frame = spark.read.parquet(str(path))
        splits = frame.rdd.glom().map(len).collect()
        assert len(splits) > 1 and sorted(splits)[-2] == 0  # one holds every row
        sizes = _writers(spark, frame, None, whole_files=True).rdd.glom().map(len).collect()
    assert sum(sizes) == 4_000
    assert len([size for size in sizes if size]) >= spark.sparkContext.defaultParallelism


def test_with_ranges_each_writer_gets_its_own_stretch_of_the_order(spark: SparkSession,
                                                                    tmp_path: Path) -> None:
    """Rows in random order over several files: in ranges, the writers' partitions follow one
    another along the order (each sorted, none overlapping the next), no row lost or added."""
    from pyspark.sql import functions as F

    rows = _random_rows(random.Random(11), 3_000)
    path = _write(tmp_path / "in", SourceFormat.PARQUET, rows)
    frame = spark.read.parquet(str(path)).repartition(4)  # each partition a random draw
    seen = in_store_order(frame, RowShape(format=SourceFormat.PARQUET), ranges=3).withColumn(
        "part", F.spark_partition_id()).collect()
    assert sorted(r["payload"] for r in seen) == sorted(r["payload"] for r in rows)
    stretches = []
    for part in sorted({r["part"] for r in seen}):
        mine = [(r["due_at"], r["key"]) for r in seen if r["part"] == part]
        assert mine == sorted(mine)
        stretches.append((mine[0], mine[-1]))
    assert len(stretches) == 3
    assert all(a[1] <= b[0] for a, b in pairwise(stretches))

"""``tocsin import``: a Spark batch job into each store, by the rules of ``POST /v1/schedules``."""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tests.pipelines.data import N_PATTERN, make_rows, read_rejects, stored_numbers
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Status
from tocsin.pipelines.bulk_import import run_import
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.stores import open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _settings(url: str, home: Path) -> Settings:
    return Settings(store=url, home=home, buckets=16, max_payload_bytes=1000)


def _register(url: str) -> None:
    store = open_store(url, buckets=16)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    store.close()


def _import_twice(spark: SparkSession, backend_url: str, tmp_path: Path, total: int,
                  say: Callable[[str], None]) -> None:
    rows = make_rows(total)
    folder = tmp_path / "in"
    folder.mkdir()
    half = len(rows.lines) // 2  # two files: a folder import
    (folder / "a.jsonl").write_text("\n".join(rows.lines[:half]) + "\n")
    (folder / "b.jsonl").write_text("\n".join(rows.lines[half:]) + "\n")
    _register(backend_url)
    settings = _settings(backend_url, tmp_path)

    first = run_import(spark, str(folder), settings=settings, rejects=str(tmp_path / "r1"))
    say(f"import of {first.rows} rows: {first.rows_per_s:,.0f} rows/s")
    store = open_store(backend_url, buckets=16)
    try:
        stored = stored_numbers(store)
        good, bad = rows.settle(set(stored))
        assert (first.created, first.existing, first.rejected) == (len(good), 0, len(bad))
        assert sorted(stored) == sorted(good)  # every good row, once
        rejects = {int(N_PATTERN.search(r["row"]).group(1)): r  # type: ignore[union-attr]
                   for r in read_rejects(first.rejects)}
        assert {n: r["field"] for n, r in rejects.items()} == bad
        assert {name: why["rows"] for name, why in first.rejected_by_field.items()} == dict(
            Counter(bad.values()))
        assert all(why["e.g."] in {r["reason"] for r in rejects.values() if r["field"] == name}
                   for name, why in first.rejected_by_field.items())
        assert all(r["reason"] and r["source"] in ("a.jsonl", "b.jsonl")
                   for r in rejects.values())

        second = run_import(spark, str(folder), settings=settings, rejects=str(tmp_path / "r2"))
        assert (second.created, second.existing, second.rejected) == (0, len(good), len(bad))
        assert len(stored_numbers(store)) == len(good)  # nothing twice
    finally:
        store.close()


def test_import_small(spark: SparkSession, backend_url: str, tmp_path: Path,
                      say: Callable[[str], None]) -> None:
    """2 000 rows, 1 % bad of each kind: every good row once, every bad row in rejects with
    its field and reason; a second run creates nothing."""
    _import_twice(spark, backend_url, tmp_path, 2_000, say)


@pytest.mark.slow
def test_import_200k(spark: SparkSession, backend_url: str, tmp_path: Path,
                     say: Callable[[str], None]) -> None:
    """The same with 200 000 rows."""
    _import_twice(spark, backend_url, tmp_path, 200_000, say)


def test_csv_and_parquet_with_mapping(spark: SparkSession, backend_url: str,
                                      tmp_path: Path) -> None:
    """CSV (JSON text cells, numeric delay) and Parquet, columns mapped onto fields, every row
    written to the import's tenant; a row naming another tenant is refused."""
    _register(backend_url)
    settings = _settings(backend_url, tmp_path)
    csv = tmp_path / "in.csv"
    csv.write_text('queue,body,delay,tenant\n'
                   'out,"{""n"": 1}",60,\n'
                   'out,"{""n"": 2}",PT1M,\n'
                   'out,"{""n"": 3}",60,other\n'
                   'out,"{""n"": 4",60,\n')
    shape = RowShape(format=SourceFormat.CSV, mapping=(("channel", "queue"), ("payload", "body")),
                     tenant="default")
    summary = run_import(spark, str(csv), settings=settings, shape=shape,
                         rejects=str(tmp_path / "r-csv"))
    assert (summary.created, summary.rejected) == (2, 2)
    reasons = {r["field"]: r["reason"] for r in read_rejects(summary.rejects)}
    assert sorted(reasons) == ["payload", "tenant"]
    assert summary.rejected_by_field == {name: {"rows": 1, "e.g.": reason}
                                         for name, reason in sorted(reasons.items())}

    parquet = tmp_path / "in.parquet"
    pq.write_table(pa.table({"queue": ["out", "out"], "payload": ['{"n": 5}', '{"n": 6}'],
                             "delay": [30.0, None], "due_at": [None, "2099-01-01T00:00:00Z"]}),
                   parquet)
    summary = run_import(spark, str(parquet), settings=settings,
                         shape=RowShape(format=SourceFormat.PARQUET,
                                        mapping=(("channel", "queue"),)),
                         rejects=str(tmp_path / "r-pq"))
    assert (summary.created, summary.rejected) == (2, 0)
    store = open_store(backend_url, buckets=16)
    try:
        assert sorted(stored_numbers(store)) == [1, 2, 5, 6]
    finally:
        store.close()


def test_naive_due_times_are_read_in_the_import_s_zone(spark: SparkSession, backend_url: str,
                                                      tmp_path: Path) -> None:
    """With ``--zone`` (``RowShape.zone``) a Parquet column of naive timestamps, as pandas
    writes them, and CSV text without an offset are wall-clock times in that zone (summer
    and winter), through Spark into each store; a time the zone skips is refused, naming it;
    without the zone every such row is refused, as the API refuses naive times."""
    _register(backend_url)
    settings = _settings(backend_url, tmp_path)
    zone = ZoneInfo("Europe/Berlin")
    walls = ["2099-01-15T09:00:00", "2099-07-01T12:00:00.250000"]
    parquet = tmp_path / "naive.parquet"
    pq.write_table(pa.table({"channel": ["out", "out"], "payload": ['{"n": 1}', '{"n": 2}'],
                             "due_at": pa.array([datetime.fromisoformat(w) for w in walls],
                                                pa.timestamp("us"))}), parquet)
    csv = tmp_path / "naive.csv"
    csv.write_text('channel,payload,due_at\n'
                   'out,"{""n"": 3}",2099-01-15 09:00:00\n'
                   'out,"{""n"": 4}",2099-07-01T12:00:00.25\n'
                   'out,"{""n"": 5}",2099-03-29 02:30:00\n')
    for path, fmt in ((parquet, SourceFormat.PARQUET), (csv, SourceFormat.CSV)):
        refused = run_import(spark, str(path), settings=settings,
                             shape=RowShape(format=fmt), rejects=str(tmp_path / f"no-{fmt}"))
        assert refused.created == 0 and refused.rejected == refused.rows
        # why, in the summary: each field's rows and one of their reasons
        assert list(refused.rejected_by_field) == ["due_at"]
        assert refused.rejected_by_field["due_at"]["rows"] == refused.rows
        assert refused.rejected_by_field["due_at"]["e.g."].endswith(
            "has no offset (Z or +hh:mm): give one, or name the zone whose wall clock it "
            "reads with tocsin import --zone, e.g. --zone Europe/Berlin")
        taken = run_import(spark, str(path), settings=settings,
                           shape=RowShape(format=fmt, zone=zone),
                           rejects=str(tmp_path / f"in-{fmt}"))
        assert taken.created == 2 and taken.rejected == taken.rows - 2
    skipped = read_rejects(str(tmp_path / "in-csv"))
    assert [(r["field"], r["reason"]) for r in skipped] == [
        ("due_at", "'2099-03-29 02:30:00' does not exist in Europe/Berlin: its clocks go "
                   "forward over it; give the time with an offset")]
    winter = int(datetime(2099, 1, 15, 8, tzinfo=UTC).timestamp() * 1000)
    summer = int(datetime(2099, 7, 1, 10, 0, 0, 250_000, tzinfo=UTC).timestamp() * 1000)
    store = open_store(backend_url, buckets=16)
    try:
        due = {json.loads(s.payload)["n"]: s.due_ms
               for s in store.list_schedules(status=Status.PENDING, limit=100)}
    finally:
        store.close()
    assert due == {1: winter, 2: summer, 3: winter, 4: summer}


def test_a_path_spark_cannot_read_is_refused_on_path(spark: SparkSession, tmp_path: Path) -> None:
    """No such file, or an empty folder where CSV is asked for: a ``ValidationError`` on
    ``path`` (Spark's own exception and stack trace before), and no store is opened."""
    from tocsin.errors import ValidationError

    (tmp_path / "empty").mkdir()
    settings = Settings(store=f"sqlite:///{tmp_path / 't.db'}", home=tmp_path)
    for path, reason in ((tmp_path / "missing.csv", "no such file or folder"),
                         (tmp_path / "empty", "cannot be read as csv")):
        with pytest.raises(ValidationError) as caught:
            run_import(spark, str(path), settings=settings, fmt=SourceFormat.CSV)
        assert caught.value.field == "path" and reason in str(caught.value)
    assert not (tmp_path / "t.db").exists()


def _shapes(folder: Path, rows: int) -> dict[str, Path]:
    """One file of ``rows`` good rows for each shape an import reads; row ``n``'s payload
    holds ``n``."""
    import json

    folder.mkdir()
    now_ms = int(time.time() * 1000)
    ns = range(rows)
    due = [now_ms + 3_600_000 + n for n in ns]
    text = [f'{{"n": {n}}}' for n in ns]
    out: dict[str, Path] = {}
    for name, columns in {
        "timestamp_ns": {"due_at": pa.array([d * 1_000_000 for d in due],
                                            pa.timestamp("ns", tz="UTC"))},
        "timestamp_ms": {"due_at": pa.array(due, pa.timestamp("ms", tz="Europe/Paris")),
                         "key": [f"k{n}" for n in ns]},
        "epoch_ms": {"due_at": pa.array(due, pa.int64()), "headers": ['{"h": "v"}'] * rows},
        "nested": {"delay": pa.array([60] * rows, pa.int64()),
                   "payload": pa.array([{"n": n, "tags": ["a"]} for n in ns]),
                   "headers": pa.array([{"h": "v"}] * rows)},
    }.items():
        table = pa.table({"channel": ["out"] * rows, "payload": text, **columns})
        out[name] = folder / f"{name}.parquet"
        pq.write_table(table, out[name])
    out["csv"] = folder / "rows.csv"
    out["csv"].write_text("channel,payload,due_at,delay\n" + "".join(
        f'out,"{{""n"": {n}}}",{d if n % 2 else ""},{"" if n % 2 else "PT1H"}\n'
        for n, d in zip(ns, due, strict=True)))
    out["jsonl"] = folder / "rows.jsonl"
    out["jsonl"].write_text("".join(json.dumps({"channel": "out", "payload": {"n": n},
                                                "delay": 60}) + "\n" for n in ns))
    return out


def test_every_shape_is_imported_column_by_column(spark: SparkSession, backend_url: str,
                                                   tmp_path: Path) -> None:
    """Each shape (timestamps of any unit and zone, epoch milliseconds, nested columns,
    headers, no keys, CSV, JSON lines) is checked without the model, and one file is loaded
    by as many writers as ``partitions`` says; a second run finds every row."""
    _register(backend_url)
    settings = _settings(backend_url, tmp_path)
    for name, path in _shapes(tmp_path / "in", 300).items():
        for run in (1, 2):
            summary = run_import(spark, str(path), settings=settings, partitions=3,
                                 rejects=str(tmp_path / f"r-{name}-{run}"))
            assert (summary.rows, summary.rejected, summary.by_model) == (300, 0, 0), name
            assert summary.created == (300 if run == 1 else 0), name
            assert summary.partitions == 3, name
            assert summary.by_columns == (0 if name == "jsonl" else 300), name
    store = open_store(backend_url, buckets=16)
    try:
        assert sorted(stored_numbers(store)) == sorted(list(range(300)) * 6)
    finally:
        store.close()


def test_chunks_commit_without_the_flush_and_the_task_ends_with_one(
        postgres_store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL: each chunk's transaction commits with ``synchronous_commit = off``; the
    loader's ``finish`` (the end of a Spark task) commits with it ``on``, which makes them
    all durable."""
    from tocsin.pipelines.loader import ImportJob, Loader
    from tocsin.stores.postgres import PostgresStore

    _register(postgres_store_url)
    store = open_store(postgres_store_url, buckets=16)
    assert isinstance(store, PostgresStore)
    modes: list[str] = []
    run = store._run

    def recording(work: Callable[[Any], Any], **kwargs: Any) -> Any:
        def recorded(conn: Any) -> Any:
            result = work(conn)
            if kwargs.get("write", True):  # the mode its commit will have
                modes.append(conn.execute("SHOW synchronous_commit").fetchone()[0])
            return result
        return run(recorded, **kwargs)

    monkeypatch.setattr(store, "_run", recording)
    shape = RowShape(format=SourceFormat.JSON)
    loader = Loader(ImportJob(store_url=postgres_store_url, buckets=16,
                              settings=_settings(postgres_store_url, tmp_path),
                              now_ms=int(time.time() * 1000), shape=shape, root="file:///in",
                              chunk=2), store)
    try:
        lines = [f'{{"channel": "out", "payload": {{"n": {n}}}, "delay": 60}}' for n in range(5)]
        tally = loader.load([(line, "file:///in/a.jsonl") for line in lines])
        assert (tally.created, tally.rejected) == (5, 0)
        assert modes == ["off"] * 3  # three chunks
        loader.finish()
        assert modes == ["off"] * 3 + ["on"]
    finally:
        store.close()


def test_an_import_at_a_terminal_shows_its_progress(spark: SparkSession, tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """For a person at a terminal the import shows its rows done, their rate, the rejects,
    the time left and the Spark tasks done out of all; the last line holds the job's final
    counts."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    _register(url)
    rows = make_rows(2_000)
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(rows.lines) + "\n")
    summary = run_import(spark, str(source), settings=_settings(url, tmp_path),
                         rejects=str(tmp_path / "r"), partitions=2, show_progress=True)
    shown = " ".join(capsys.readouterr().out.split())
    assert summary.rejected > 0
    assert f"{summary.rows:,} rows" in shown
    assert "rows/s" in shown
    assert f"{summary.rejected:,} rejected" in shown
    assert "about 0:00:00 left" in shown  # every task done
    tasks = re.search(r"tasks (\d+)/(\d+)", shown)
    assert tasks and tasks.group(1) == tasks.group(2) != "0"

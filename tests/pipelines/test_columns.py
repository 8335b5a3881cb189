"""An import's CSV or Parquet batch checked column by column (tocsin.pipelines.columns and
Loader.check_batch) gives the very schedules and rejects of the row's way, row for row."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Policy
from tocsin.pipelines.columns import plain_columns
from tocsin.pipelines.loader import ImportJob, Loader
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.stores import open_store

NOW_MS = int(time.time() * 1000)
_HOME = Path(tempfile.mkdtemp(prefix="tocsin-columns-"))
_URL = f"sqlite:///{_HOME / 'store.db'}"
_STORE = open_store(_URL, buckets=4)
for _tenant in ("default", "t1"):
    _STORE.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant=_tenant))
    _STORE.put_policy(Policy(name="p", max_in_flight=1, tenant=_tenant), now_ms=NOW_MS)
_URIS = ["file:///in/a.parquet", "file:///in/sub/b.parquet"]


def _loader(shape: RowShape) -> Loader:
    return Loader(ImportJob(store_url=_URL, buckets=4, settings=Settings(
        store=_URL, home=_HOME, max_payload_bytes=200), now_ms=NOW_MS, shape=shape,
        root="file:///in"), _STORE)


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 7).flatmap(lambda n: odd if n == 0 else usual)


_odd_text = st.sampled_from(["", "a\x00b", "x" * 257, " ", "é" * 129, "bad name", "a\n",
                             "closed"]) | st.text(max_size=4)
_payloads = _mostly(st.sampled_from(['{"order": 1, "amount": 1250}', "[1, 2.5]", '"text"',
                                     "null", '{"b": {"z": 1, "a": [true]}, "a": "é"}']),
                    st.none() | st.sampled_from(["{", "NaN", "1e400", '"\\ud800"', '"😀"',
                                                 "\ufeff{}", '{"a": "\\u0000"}',
                                                 '"' + "x" * 300 + '"']))
_row = st.fixed_dictionaries({
    "channel": _mostly(st.just("out"), st.none() | _odd_text),
    "key": _mostly(st.text(min_size=1, max_size=8).map(lambda k: f"k{k}"),
                   st.none() | _odd_text),
    "payload": _payloads,
    "payload_text": _mostly(st.none(), st.text(max_size=4) | st.just("a\x00")),
    "delay": _mostly(st.sampled_from([3600.0, 0.0, 1.5, 86400.0]),
                     st.none() | st.sampled_from([-1.0, float("nan"), float("inf"), 1e300])),
    "due_at": _mostly(st.none(), st.sampled_from(["2027-01-15T09:00:00Z", "2020-01-01T00:00:00Z",
                                                  "2027-01-15T09:00:00", "x", "a\x00"])),
    "tenant": _mostly(st.none() | st.just("t1"), _odd_text),
    "ordering_key": _mostly(st.none() | st.just("o-1"), _odd_text),
    "policy": _mostly(st.none() | st.just("p"), _odd_text),
    "headers": _mostly(st.none(), st.just('{"h": "v"}')),
    "extra": _mostly(st.none(), st.just("x")),
})
_TEXT_SCHEMA = {name: pa.string() for name in (
    "channel", "key", "payload", "payload_text", "due_at", "tenant", "ordering_key", "policy",
    "headers", "extra")}


def _batch(rows: list[dict[str, Any]], delay_type: pa.DataType) -> pa.RecordBatch:
    fields = [pa.field(n, t) for n, t in {**_TEXT_SCHEMA, "delay": delay_type}.items()]
    if pa.types.is_string(delay_type):
        rows = [{**r, "delay": None if r["delay"] is None else repr(r["delay"])} for r in rows]
    elif pa.types.is_integer(delay_type):
        rows = [{**r, "delay": int(r["delay"]) if r["delay"] is not None
                 and abs(r["delay"]) < 2 ** 62 else None} for r in rows]
    return pa.RecordBatch.from_pylist(rows, schema=pa.schema(fields))


def _same(shape: RowShape, batch: pa.RecordBatch) -> None:
    uris = [_URIS[i % 2] for i in range(batch.num_rows)]
    by_columns = _loader(shape).check_batch(batch, uris)
    by_rows = _loader(shape).check(list(zip(batch.to_pylist(), uris, strict=True)))
    assert by_columns.good == by_rows.good
    assert by_columns.tally == by_rows.tally


@settings(max_examples=400, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, min_size=1, max_size=12),
       delay_type=st.sampled_from([pa.float64(), pa.int64(), pa.string()]),
       fmt=st.sampled_from([SourceFormat.PARQUET, SourceFormat.CSV]),
       tenant=st.sampled_from([None, "t1"]))
def test_a_batch_checks_as_its_rows_do(rows: list[dict[str, Any]], delay_type: pa.DataType,
                                       fmt: SourceFormat, tenant: str | None) -> None:
    _same(RowShape(format=fmt, tenant=tenant), _batch(rows, delay_type))


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, min_size=1, max_size=6))
def test_a_mapped_column_checks_as_its_rows_do(rows: list[dict[str, Any]]) -> None:
    batch = _batch(rows, pa.float64())
    renamed = batch.rename_columns(["queue" if n == "channel" else n
                                    for n in batch.schema.names])
    shape = RowShape(format=SourceFormat.PARQUET, mapping=(("channel", "queue"),))
    _same(shape, renamed)
    both = batch.append_column("queue", batch.column("channel"))  # a field given twice
    assert plain_columns(both, shape) is None
    _same(shape, both)


def test_plain_rows_are_found_by_their_columns() -> None:
    rows = [{"channel": "out", "key": f"k{n}", "payload": '{"n": 1}', "delay": 60.0,
             "extra": None} for n in range(3)]
    rows[1]["key"] = "a\x00b"
    rows[2]["extra"] = "x"
    batch = pa.RecordBatch.from_pylist(rows)
    columns = plain_columns(batch, RowShape(format=SourceFormat.PARQUET))
    assert columns is not None and columns.plain == [True, False, False]
    checked = _loader(RowShape(format=SourceFormat.PARQUET)).check_batch(batch, _URIS[:1] * 3)
    assert [index for _, index, _ in checked.good] == [0]
    assert [(r["field"], r["reason"]) for r in checked.tally.rejects] == [
        ("key", "must not contain NUL (\\u0000)"), ("extra", "Extra inputs are not permitted")]

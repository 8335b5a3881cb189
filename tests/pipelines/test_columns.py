"""An import's CSV or Parquet batch checked column by column (tocsin.pipelines.columns and
Loader.check_batch) gives the very schedules and rejects of the row's way, row for row, for
every shape an import reads: due_at as text, as a timestamp of any unit and zone, as epoch
milliseconds; delay as a number or text; payload as JSON text or a nested column; headers as
JSON text or a struct; with keys or without (derived)."""

from __future__ import annotations

import json
import tempfile
import time
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from unittest.mock import patch
from zoneinfo import ZoneInfo

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Policy
from tocsin.pipelines.columns import plain_columns
from tocsin.pipelines.loader import Checked, ImportJob, Loader, Tally
from tocsin.pipelines.rows import RowShape, SourceFormat, json_value
from tocsin.stores import open_store
from tocsin.stores.rows import item_of
from tocsin.validation.schedule import Problem, ScheduleCheck

NOW_MS = int(time.time() * 1000)
_HOME = Path(tempfile.mkdtemp(prefix="tocsin-columns-"))
_URL = f"sqlite:///{_HOME / 'store.db'}"


def _registered(url: str) -> Store:
    store = open_store(url, buckets=4)
    for tenant in ("default", "t1"):
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant=tenant))
        store.put_policy(Policy(name="p", max_in_flight=1, tenant=tenant), now_ms=NOW_MS)
    return store


_STORE = _registered(_URL)
_URIS = ["file:///in/a.parquet", "file:///in/sub/b.parquet"]


def _loader(shape: RowShape, store: Store = _STORE, url: str = _URL) -> Loader:
    return Loader(ImportJob(store_url=url, buckets=4, settings=Settings(
        store=url, home=_HOME, max_payload_bytes=200), now_ms=NOW_MS, shape=shape,
        root="file:///in"), store)


def _mostly(usual: st.SearchStrategy[Any], odd: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.integers(0, 7).flatmap(lambda n: odd if n == 0 else usual)


_odd_text = st.sampled_from(["", "a\x00b", "x" * 257, " ", "é" * 129, "bad name", "a\n",
                             "closed"]) | st.text(max_size=4)
_payloads = _mostly(st.sampled_from(['{"order": 1, "amount": 1250}', "[1, 2.5]", '"text"',
                                     "null", '{"b": {"z": 1, "a": [true]}, "a": "é"}']),
                    st.none() | st.sampled_from(["{", "NaN", "1e400", '"\\ud800"', '"😀"',
                                                 "\ufeff{}", '{"a": "\\u0000"}',
                                                 '"' + "x" * 300 + '"']))
_nested = _mostly(st.builds(lambda n, tags: {"order": n, "amount": 1250, "tags": tags},
                            st.integers(0, 3), st.lists(st.sampled_from(["a", "é"]),
                                                        max_size=2)),
                  st.none() | st.just({"order": 1, "amount": None, "tags": ["x" * 300]}))
_due_ms = st.sampled_from([NOW_MS + 3_600_000, NOW_MS + 3_600_125, NOW_MS + 1,
                           NOW_MS - 86_400_000, 1_577_836_800_000, 253_402_300_799_999,
                           253_402_300_800_000, 4_013_721_000_000, 4_034_280_600_000])
"""An hour ahead (whole and fractional), within the grace window, a day past, 2020, the
last instant of year 9999, the first after it; 2097-03-10 02:30 and 2097-11-03 01:30 (as
wall-clock times in New York, one its clocks skip and one they pass twice)."""
_row = st.fixed_dictionaries({
    "channel": _mostly(st.just("out"), st.none() | _odd_text),
    "key": st.sampled_from([None, None, None]) | st.text(min_size=1, max_size=8).map(
        lambda k: f"k{k}") | _odd_text,
    "payload": _payloads,
    "nested": _nested,
    "payload_text": _mostly(st.none(), st.text(max_size=4) | st.just("a\x00")),
    "delay": _mostly(st.sampled_from([3600.0, 0.0, 1.5, 86400.0]),
                     st.none() | st.sampled_from([-1.0, float("nan"), float("inf"), 1e300])),
    "due_at": _mostly(st.none(), st.sampled_from([
        "2027-01-15T09:00:00Z", "2020-01-01T00:00:00Z", "2027-01-15T09:00:00", "x", "a\x00",
        "1895466184523", "12", "2027-01-15T09:00:00.25+01:00", "2027-01-15t09:00:00z",
        "2027-01-15 09:00:00Z", "2027-02-30T09:00:00Z", "2027-01-15T09:00Z",
        "2027-01-15T09:00:00.1234567Z", "9999-12-31T23:30:00-01:00", "2027-01-15T23:59:60Z",
        "2027-01-15T09:00:00-00:00", "\u0662027-01-15T09:00:00Z", "2027-01-15 09:00",
        "2027-03-14T02:30:00", "2027-11-07t01:30:00.5", "\u0662027-01-15T09:00:00"])),
    "due_ms": _mostly(st.none(), _due_ms),
    "tenant": _mostly(st.none() | st.just("t1"), _odd_text),
    "ordering_key": _mostly(st.none() | st.just("o-1"), _odd_text),
    "policy": _mostly(st.none() | st.just("p"), _odd_text),
    "headers": _mostly(st.none(), st.sampled_from(['{"h": "v"}', "{}", '{"h": 1}',
                                                  '{"Host": "v"}', '{"h": "a\\r\\nb"}',
                                                  '{"h": "a\\u0000"}', '{"h": "\\ud800"}',
                                                  "[", '{"h": "' + "x" * 300 + '"}'])),
    "extra": _mostly(st.none(), st.just("x")),
})
_TEXT = ("channel", "key", "payload_text", "tenant", "ordering_key", "policy", "extra")

_DUE_TYPES = {
    "text": None,
    "timestamp_us_utc": pa.timestamp("us", tz="UTC"),
    "timestamp_ms_utc": pa.timestamp("ms", tz="Etc/UTC"),
    "timestamp_s_paris": pa.timestamp("s", tz="Europe/Paris"),
    "timestamp_us_kolkata": pa.timestamp("us", tz="+05:30"),
    "timestamp_naive": pa.timestamp("us"),
    "epoch_ms": pa.int64(),
}
"""How a batch gives ``due_at`` (text: the row's own text; the others: its ``due_ms``)."""


def _batch(rows: list[dict[str, Any]], *, delay_type: pa.DataType, due: str,
           nested_payload: bool, struct_headers: bool) -> pa.RecordBatch:
    import json

    columns: dict[str, pa.Array] = {name: pa.array([r[name] for r in rows], pa.string())
                                    for name in _TEXT}
    if nested_payload:
        columns["payload"] = pa.array([r["nested"] for r in rows])
    else:
        columns["payload"] = pa.array([r["payload"] for r in rows], pa.string())
    if struct_headers:
        values = []
        for r in rows:
            try:
                value = None if r["headers"] is None else json.loads(r["headers"])
            except ValueError:
                value = None
            text = value.get("h") if isinstance(value, dict) else None
            values.append({"h": text} if isinstance(text, str) and "\ud800" not in text
                          else None)
        columns["headers"] = pa.array(values, pa.struct([("h", pa.string())]))
    else:
        columns["headers"] = pa.array([r["headers"] for r in rows], pa.string())
    delays = [r["delay"] for r in rows]
    if pa.types.is_string(delay_type):
        delays = [None if d is None else repr(d) for d in delays]
    elif pa.types.is_integer(delay_type):
        delays = [int(d) if d is not None and abs(d) < 2 ** 62 else None for d in delays]
    columns["delay"] = pa.array(delays, delay_type)
    kind = _DUE_TYPES[due]
    if kind is None:
        columns["due_at"] = pa.array([r["due_at"] for r in rows], pa.string())
    else:
        ms = [r["due_ms"] for r in rows]
        if pa.types.is_timestamp(kind):
            per_ms = {"s": 1 / 1000, "ms": 1, "us": 1000}[kind.unit]
            # Arrow hands out no time in year 10000 (nor, in a zone east of UTC, the last
            # day of 9999).
            last = 253_402_300_799_999 if kind.tz in ("UTC", "Etc/UTC") else 253_402_214_400_000
            ms = [None if m is None or m > last else int(m * per_ms) for m in ms]
        columns["due_at"] = pa.array(ms, pa.int64()).cast(kind)
    return pa.RecordBatch.from_pydict(columns)


def _without_counts(tally: Tally) -> Tally:
    return replace(tally, by_columns=0, by_model=0)


def _both(shape: RowShape, batch: pa.RecordBatch, loader: Any = _loader,
          ) -> tuple[Checked, Checked, list[str]]:
    uris = [_URIS[i % 2] for i in range(batch.num_rows)]
    by_columns = loader(shape).check_batch(batch, uris)
    by_rows = loader(shape).check(list(zip(batch.to_pylist(), uris, strict=True)))
    return by_columns, by_rows, uris


def _same(shape: RowShape, batch: pa.RecordBatch) -> Checked:
    by_columns, by_rows, _ = _both(shape, batch)
    assert by_columns.good == by_rows.good
    assert _without_counts(by_columns.tally) == _without_counts(by_rows.tally)
    return by_columns


_zones = st.sampled_from([None, ZoneInfo("America/New_York"), ZoneInfo("UTC")])
"""An import's ``--zone``: none, one with summer time, UTC."""
_shapes = st.fixed_dictionaries({
    "delay_type": st.sampled_from([pa.float64(), pa.int64(), pa.string()]),
    "due": st.sampled_from(sorted(_DUE_TYPES)),
    "nested_payload": st.booleans(),
    "struct_headers": st.booleans(),
})


@settings(max_examples=600, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, min_size=1, max_size=12), shape=_shapes,
       fmt=st.sampled_from([SourceFormat.PARQUET, SourceFormat.CSV]),
       tenant=st.sampled_from([None, "t1"]), zone=_zones)
def test_a_batch_checks_as_its_rows_do(rows: list[dict[str, Any]], shape: dict[str, Any],
                                       fmt: SourceFormat, tenant: str | None,
                                       zone: ZoneInfo | None) -> None:
    _same(RowShape(format=fmt, tenant=tenant, zone=zone), _batch(rows, **shape))


@settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, min_size=1, max_size=6))
def test_a_mapped_column_checks_as_its_rows_do(rows: list[dict[str, Any]]) -> None:
    batch = _batch(rows, delay_type=pa.float64(), due="timestamp_us_utc",
                   nested_payload=False, struct_headers=False)
    renamed = batch.rename_columns(["queue" if n == "channel" else "when" if n == "due_at"
                                    else n for n in batch.schema.names])
    shape = RowShape(format=SourceFormat.PARQUET, mapping=(("channel", "queue"),
                                                           ("due_at", "when")))
    _same(shape, renamed)
    both = renamed.append_column("channel", batch.column("channel"))  # a field given twice
    assert plain_columns(both, shape) is None
    _same(shape, both)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, min_size=1, max_size=12), delay_type=st.sampled_from(
    [pa.float64(), pa.int64(), pa.string()]), tenant=st.sampled_from([None, "t1"]))
def test_json_lines_check_as_the_model_does(rows: list[dict[str, Any]],
                                            delay_type: pa.DataType,
                                            tenant: str | None) -> None:
    """JSON lines (API bodies) give the same rows to store and the same rejects whether
    their plainly valid rows are built without a schedule each or every row goes through
    the API's model."""
    import json

    batch = _batch(rows, delay_type=delay_type, due="text", nested_payload=True,
                   struct_headers=True)
    lines = [(json.dumps({k: v for k, v in row.items() if v is not None}), _URIS[i % 2])
             for i, row in enumerate(batch.to_pylist())]
    shape = RowShape(format=SourceFormat.JSON, tenant=tenant)
    plain = _loader(shape).check(lines)
    with patch.object(ScheduleCheck, "plain_fields", lambda self, item: None):
        modelled = _loader(shape).check(lines)
    assert plain.good == modelled.good
    assert _without_counts(plain.tally) == _without_counts(modelled.tally)


_GOOD = {"channel": "out", "key": None, "payload": '{"n": 1}', "nested": {"n": 1},
         "payload_text": None, "delay": None, "due_at": None, "due_ms": NOW_MS + 3_600_250,
         "tenant": None, "ordering_key": None, "policy": None, "headers": '{"h": "v"}',
         "extra": None}


@pytest.mark.parametrize("due", sorted(set(_DUE_TYPES) - {"text", "timestamp_naive"}))
@pytest.mark.parametrize("nested_payload", [False, True])
@pytest.mark.parametrize("keyed", [False, True])
def test_every_shape_takes_the_column_path(due: str, nested_payload: bool,
                                           keyed: bool) -> None:
    """Good rows of each shape are checked column by column, none by the model."""
    rows = [{**_GOOD, "key": f"k{n}" if keyed else None, "nested": {"n": n},
             "payload": f'{{"n": {n}}}'} for n in range(5)]
    batch = _batch(rows, delay_type=pa.float64(), due=due, nested_payload=nested_payload,
                   struct_headers=nested_payload)
    checked = _same(RowShape(format=SourceFormat.PARQUET), batch)
    assert (checked.tally.by_columns, checked.tally.by_model, len(checked.good)) == (5, 0, 5)
    csv_rows = [{**_GOOD, "due_ms": None, "due_at": text} for text in (
        "2099-01-15T09:00:00Z", str(NOW_MS + 60_000), None)]
    csv_rows[2]["delay"] = 60.0
    for delay_type in (pa.string(), pa.float64()):
        csv = _batch(csv_rows, delay_type=delay_type, due="text", nested_payload=False,
                     struct_headers=False)
        checked = _same(RowShape(format=SourceFormat.CSV), csv)
        assert (checked.tally.by_columns, checked.tally.by_model) == (3, 0)


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


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(rows=st.lists(_row, min_size=1, max_size=12), shape=_shapes)
def test_a_store_takes_both_ways_alike(backend_url: str, rows: list[dict[str, Any]],
                                       shape: dict[str, Any]) -> None:
    """Written one way and then the other, on each store: the second finds every row the
    first stored under the same key with the same request (the same digest), creates
    nothing, and rejects the same rows with the same reasons."""
    store = _store_at(backend_url)
    batch = _batch(rows, **shape)
    uris = [_URIS[i % 2] for i in range(batch.num_rows)]
    fmt = RowShape(format=SourceFormat.PARQUET)
    first = _loader(fmt, store, backend_url).load_batch(batch, uris)
    second = _loader(fmt, store, backend_url).load(list(zip(batch.to_pylist(), uris,
                                                            strict=True)))
    assert (second.created, second.existing) == (0, first.created + first.existing)
    assert second.rejects == first.rejects


def _item(row: tuple[Any, ...]) -> NewSchedule:
    """The schedule a checked row stores."""
    return item_of(row, key_retention_ms=0)


_OPEN: dict[str, Store] = {}


def _store_at(url: str) -> Store:
    """One registered store per backend for the whole test (hypothesis runs its examples
    against it: keys already stored by an earlier example are simply found again)."""
    if url not in _OPEN:
        _OPEN[url] = _registered(url)
    return _OPEN[url]


def test_derived_keys_follow_the_due_time_and_outlive_the_import_s_now() -> None:
    """A row without a key is keyed by its due time, its file, then its digest: rows in due
    order are keyed in that order (the store's key index takes them side by side), whichever
    way they were checked; a row giving a delay gets the same key in a later run of the
    import."""
    shape = RowShape(format=SourceFormat.PARQUET)
    due = pa.array([(NOW_MS + 3_600_000 + n) * 1000 for n in range(0, 50_000, 1_000)],
                   pa.timestamp("us", tz="UTC"))
    batch = pa.RecordBatch.from_pydict({
        "channel": ["out"] * len(due),
        "payload": [f'{{"n": {n}}}' for n in range(len(due))], "due_at": due})
    by_columns, by_rows, uris = _both(shape, batch)
    keys = [_item(row).key or "" for row, _, _ in by_columns.good]
    assert keys == [_item(row).key for row, _, _ in by_rows.good]
    assert keys == sorted(keys) and all(k.startswith("import:t") for k in keys)
    # Then the file: rows sharing a time are kept together by file.
    files = {uri: {k.split(":")[2] for k, u in zip(keys, uris, strict=True) if u == uri}
             for uri in _URIS}
    assert all(len(tags) == 1 for tags in files.values()) and len(set.union(*files.values())) == 2

    delays = pa.RecordBatch.from_pydict({"channel": ["out"], "payload": ['{"n": 1}'],
                                         "delay": [3600.0]})
    later = Loader(replace(_loader(shape).job, now_ms=NOW_MS + 61_000), _STORE)
    first = _item(_loader(shape).check_batch(delays, _URIS[:1]).good[0][0])
    again = _item(later.check_batch(delays, _URIS[:1]).good[0][0])
    assert first.due_ms != again.due_ms
    assert first.key == again.key and (first.key or "").startswith("import:d")


_json_texts = st.one_of(
    st.text(max_size=12),
    st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=3), inner, max_size=3),
                 max_leaves=6).map(json.dumps),
).flatmap(lambda text: st.sampled_from(["", " ", "\n", "\ufeff", "x", "}"]).flatmap(
    lambda before: st.sampled_from(["", " ", "\t", "x", "{"]).map(
        lambda after: before + text + after)))


@settings(max_examples=300, deadline=None)
@given(text=_json_texts)
def test_json_text_is_read_as_json_reads_it(text: str) -> None:
    """The import's reader of JSON text (a payload, headers, a line) answers as ``json.loads``
    with NaN and Infinity refused: the same value, or the same error."""
    def answer(read: Any) -> tuple[str, Any]:
        try:
            return "value", read(text)
        except ValueError as error:
            return type(error).__name__, str(error)

    def loads(text: str) -> Any:
        return json.loads(text, parse_constant=_refuse)

    assert repr(answer(json_value)) == repr(answer(loads))


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def test_a_plain_text_payload_column_is_refused_with_the_field_that_takes_it() -> None:
    """A text ``payload`` column holds JSON text: a row of plain text there is refused on
    ``payload`` with the column and the mapping that take it, and with that mapping the same
    row is a text payload."""
    row = {"channel": "out", "payload": "reminder for order 7", "delay": 60}
    refused = RowShape(format=SourceFormat.PARQUET).item(dict(row), source="a.parquet")
    assert isinstance(refused, Problem)
    assert refused.field == "payload"
    assert refused.reason.startswith("not JSON text: ")
    assert "payload_text column: --map payload_text=payload" in refused.reason
    mapped = RowShape(format=SourceFormat.PARQUET, mapping=(("payload_text", "payload"),))
    taken = mapped.item(dict(row), source="a.parquet")
    assert not isinstance(taken, Problem)
    assert taken[0]["payload_text"] == "reminder for order 7"
    assert "payload" not in taken[0]


def test_due_times_without_an_offset_are_wall_clock_times_in_the_import_s_zone() -> None:
    """With ``--zone``, a naive timestamp column and text without an offset name that zone's
    wall-clock times, column by column as row by row; a time its clocks skip or pass twice
    is refused on ``due_at``, saying which; without a zone all of them are refused."""
    zone = ZoneInfo("America/New_York")
    walls = [datetime.fromisoformat(wall) for wall in (  # naive: wall-clock times
        "2097-01-15T09:00", "2097-07-01T12:00:00.25", "2097-03-10T02:30", "2097-11-03T01:30")]
    batch = pa.RecordBatch.from_pydict({
        "channel": ["out"] * 4, "payload": ['{"n": 1}'] * 4,
        "due_at": pa.array(walls, pa.timestamp("us"))})
    winter = int(datetime(2097, 1, 15, 14, tzinfo=UTC).timestamp() * 1000)
    summer = int(datetime(2097, 7, 1, 16, 0, 0, 250_000, tzinfo=UTC).timestamp() * 1000)
    for table in (batch, _as_csv_text(batch)):
        fmt = SourceFormat.PARQUET if table is batch else SourceFormat.CSV
        checked = _same(RowShape(format=fmt, zone=zone), table)
        assert [index for _, index, _ in checked.good] == [0, 1]
        assert [winter in row for row, _, _ in checked.good] == [True, False]
        assert [summer in row for row, _, _ in checked.good] == [False, True]
        assert [(r["field"], r["reason"].split(" in America/New_York: ")[1])
                for r in checked.tally.rejects] == [
            ("due_at", "its clocks go forward over it; give the time with an offset"),
            ("due_at", "its clocks go back over it; give the time with an offset")]
        refused = _same(RowShape(format=fmt), table)
        assert not refused.good
        assert [(r["field"], r["reason"].split(": ", 1)[1]) for r in refused.tally.rejects] == [
            ("due_at", "give one, or name the zone whose wall clock it reads with tocsin "
                       "import --zone, e.g. --zone Europe/Berlin")] * 4
    fast = _loader(RowShape(format=SourceFormat.PARQUET, zone=zone)).check_batch(
        batch.slice(0, 2), _URIS[:1] * 2)
    assert (fast.tally.by_columns, fast.tally.by_model) == (2, 0)  # no row the row's way
    line = '{"channel": "out", "payload": 1, "due_at": "2097-07-01 12:00"}'  # JSON lines
    item = RowShape(format=SourceFormat.JSON, zone=zone).item(line, source="a.jsonl")
    assert not isinstance(item, Problem) and item[0]["due_at"] == "2097-07-01T12:00:00-04:00"


def _as_csv_text(batch: pa.RecordBatch) -> pa.RecordBatch:
    """``batch`` with its due times as CSV text without an offset (``2097-01-15 09:00:00``)."""
    walls = batch.column("due_at").to_pylist()
    return batch.set_column(batch.schema.get_field_index("due_at"), "due_at", pa.array(
        [wall.isoformat(sep=" ") for wall in walls], pa.string()))

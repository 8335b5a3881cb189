"""Issue 42: labels by the other ways in, on both stores. The commands topic's ``create`` and
``recurring`` take ``labels`` as the API does; an import takes them as a JSON line's object, a
CSV cell or Parquet text column (``k=v,k2=v2`` or a JSON object), a Parquet struct or map
column. A bad label is refused naming the field (``labels``, ``labels.<key>``) and writes
nothing; what is stored is found by a selector through the store's index."""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pytest

from tests.pipelines.data import read_rejects
from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.pipelines.loader import ImportJob, Loader
from tocsin.pipelines.rows import RowShape, SourceFormat

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

NOW_MS = int(time.time() * 1000)


def _selected(store: Store, selector: tuple[tuple[str, str], ...]) -> list[dict[str, str]]:
    """The labels of every schedule the selector finds, in id order."""
    return [s.labels for s in store.list_schedules(labels=selector, limit=1000)]


def _apply(applier: CommandApplier, *bodies: dict[str, Any]) -> list[Any]:
    return applier.apply([Message("t", 0, i, NOW_MS, json.dumps(b).encode())
                          for i, b in enumerate(bodies)])


def test_the_commands_topic_creates_with_labels_and_names_a_bad_one(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x"))
    base = {"op": "create", "channel": "out", "payload": 1, "delay": 3600}
    made, bad_key, bad_value, too_many, not_text = _apply(
        applier, {**base, "labels": {"team": "billing", "run": "c1"}},
        {**base, "labels": {"bad key": "x", "run": "c1"}},
        {**base, "labels": {"team": "a b", "run": "c1"}},
        {**base, "labels": {f"k{i}": "v" for i in range(17)}},
        {**base, "labels": {"run": 7}})
    assert made.outcome is Outcome.APPLIED and made.id is not None
    assert store.get(made.id).labels == {"team": "billing", "run": "c1"}
    assert [(a.outcome, a.field) for a in (bad_key, bad_value, too_many, not_text)] == [
        (Outcome.INVALID, "labels"), (Outcome.INVALID, "labels.team"),
        (Outcome.INVALID, "labels"), (Outcome.INVALID, "labels.run")]
    assert "label key 'bad key'" in (bad_key.reason or "")
    # Only the good one is stored, and the index finds it.
    assert _selected(store, (("run", "c1"),)) == [{"run": "c1", "team": "billing"}]
    assert len(store.list_schedules(limit=100)) == 1


def test_a_recurring_command_keeps_its_labels_and_names_a_bad_one(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x"))
    rule = {"op": "recurring", "channel": "out", "payload": 1, "cron": "0 9 * * *"}
    made, bad = _apply(applier, {**rule, "labels": {"team": "ops"}},
                       {**rule, "labels": {"team": "no way"}})
    assert made.outcome is Outcome.APPLIED and made.id is not None
    assert store.get_recurring(made.id).labels == {"team": "ops"}
    assert (bad.outcome, bad.field) == (Outcome.INVALID, "labels.team")
    assert len(store.list_recurring()) == 1


def _loader(store: Store, backend_url: str, fmt: SourceFormat) -> Loader:
    home = Path(tempfile.mkdtemp(prefix="tocsin-labels-"))
    return Loader(ImportJob(store_url=backend_url, buckets=16, settings=Settings(
        store=backend_url, home=home), now_ms=NOW_MS, shape=RowShape(format=fmt),
        root="file:///in"), store)


def test_csv_cells_give_labels_as_pairs_or_json_and_a_bad_cell_is_a_reject(
        store: Store, backend_url: str) -> None:
    loader = _loader(store, backend_url, SourceFormat.CSV)
    cells = ["team=billing,run=csv", '{"team": "search", "run": "csv"}', None,
             "team=billing,run=csv,oops", '{"team": 1', "run=csv,team=a b", "run=csv"]
    batch = pa.RecordBatch.from_pydict({
        "channel": ["out"] * len(cells), "payload": [str(n) for n in range(len(cells))],
        "delay": ["3600"] * len(cells), "labels": cells})
    tally = loader.load_batch(batch, ["file:///in/a.csv"] * len(cells))
    assert (tally.created, tally.rejected) == (4, 3)
    assert [(r["field"], r["reason"].split(":")[0]) for r in tally.rejects] == [
        ("labels", "'oops' is not key=value (labels as text are k=v[,k2=v2...] or a JSON "
                   "object)"),
        ("labels", "not JSON text"), ("labels.team", "must be up to 63 letters, digits, '.', "
                                                     "'_', '-' or '/'")]
    assert sorted(map(str, _selected(store, (("run", "csv"),)))) == sorted(map(str, [
        {"run": "csv", "team": "billing"}, {"run": "csv", "team": "search"}, {"run": "csv"}]))
    assert _selected(store, (("run", "csv"), ("team", "billing"))) == [
        {"run": "csv", "team": "billing"}]
    assert len(store.list_schedules(limit=100)) == 4  # the row without labels too


def test_parquet_struct_and_map_columns_give_labels(store: Store, backend_url: str) -> None:
    loader = _loader(store, backend_url, SourceFormat.PARQUET)
    struct = pa.array([{"team": "billing", "run": "pq"}, {"team": None, "run": "pq"},
                       {"team": "x y", "run": "pq"}],
                      pa.struct([("team", pa.string()), ("run", pa.string())]))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["out"] * 3), pa.array(["1", "2", "3"]), pa.array([60.0] * 3), struct],
        names=["channel", "payload", "delay", "labels"])
    tally = loader.load_batch(batch, ["file:///in/a.parquet"] * 3)
    assert (tally.created, tally.rejected) == (2, 1)
    assert tally.rejects[0]["field"] == "labels.team"
    mapped = pa.array([[("team", "maps"), ("run", "pq")], [("bad key", "v")]],
                      pa.map_(pa.string(), pa.string()))
    batch = pa.RecordBatch.from_arrays(
        [pa.array(["out"] * 2), pa.array(["4", "5"]), pa.array([60.0] * 2), mapped],
        names=["channel", "payload", "delay", "labels"])
    tally = loader.load_batch(batch, ["file:///in/b.parquet"] * 2)
    assert (tally.created, tally.rejected, tally.rejects[0]["field"]) == (1, 1, "labels")
    assert sorted(map(str, _selected(store, (("run", "pq"),)))) == sorted(map(str, [
        {"run": "pq", "team": "billing"}, {"run": "pq"}, {"run": "pq", "team": "maps"}]))


def test_an_import_job_writes_labels_from_json_lines_and_csv(
        spark: SparkSession, backend_url: str, store: Store, tmp_path: Path) -> None:
    """Through the Spark job (``tocsin import``): labelled rows are found by a selector, a bad
    label is a reject naming its field, and a second run creates nothing."""
    from tocsin.pipelines.bulk_import import run_import

    settings = Settings(store=backend_url, home=tmp_path, buckets=16)
    lines = tmp_path / "in.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in (
        {"channel": "out", "payload": 1, "delay": 600, "labels": {"src": "jsonl", "n": "1"}},
        {"channel": "out", "payload": 2, "delay": 600, "labels": {"src": "jsonl", "n": "2"}},
        {"channel": "out", "payload": 3, "delay": 600, "labels": {"src": "jsonl", "n": "a b"}},
    )) + "\n")
    csv = tmp_path / "in.csv"
    csv.write_text('channel,payload,delay,labels\n'
                   'out,1,600,"src=csv,n=1"\n'
                   'out,2,600,"{""src"": ""csv"", ""n"": ""2""}"\n'
                   'out,3,600,src=csv n=3\n')
    for _ in range(2):
        first = run_import(spark, str(lines), settings=settings,
                           rejects=str(tmp_path / "r-jsonl"))
        second = run_import(spark, str(csv), settings=settings, rejects=str(tmp_path / "r-csv"))
        assert (first.created + first.existing, first.rejected) == (2, 1)
        assert (second.created + second.existing, second.rejected) == (2, 1)
    assert (first.created, second.created) == (0, 0)  # the second run: nothing new
    assert [r["field"] for r in read_rejects(first.rejects)] == ["labels.n"]
    assert [r["field"] for r in read_rejects(second.rejects)] == ["labels.src"]  # "csv n=3"
    assert sorted(s["n"] for s in _selected(store, (("src", "jsonl"),))) == ["1", "2"]
    assert sorted(s["n"] for s in _selected(store, (("src", "csv"),))) == ["1", "2"]


def test_import_recurring_keeps_labels(store: Store, backend_url: str, tmp_path: Path) -> None:
    from tocsin.pipelines.rule_import import import_rules

    rules = tmp_path / "rules.jsonl"
    rule = {"channel": "out", "payload": 1, "every": "PT90M",
            "anchor": "2030-01-01T00:00:00Z"}
    rules.write_text(json.dumps({**rule, "labels": {"team": "ops"}}) + "\n"
                     + json.dumps({**rule, "labels": {"team": "no way"}}) + "\n")
    summary = import_rules(str(rules), settings=Settings(store=backend_url), tenant=None)
    assert (summary["rules"], summary["invalid"]) == (1, 1), summary
    assert summary["problems"][0]["field"] == "labels.team"
    assert [r.labels for r in store.list_recurring()] == [{"team": "ops"}]


@pytest.mark.parametrize("text, want", [
    ("a=1, b=2", {"a": "1", "b": "2"}), ('{"a": "1"}', {"a": "1"}), ("", {}),
    (" a = 1 ", {"a": "1"})])
def test_labels_as_text(text: str, want: dict[str, str]) -> None:
    from tocsin.domain.labels import labels_of_text

    assert labels_of_text(text) == want


@pytest.mark.parametrize("text, reason", [
    ("a=1,a=2", "given twice"), ("[1]", "not key=value"), ('{"a": 1', "not JSON text"),
    ("a", "not key=value")])
def test_bad_labels_as_text_name_the_field(text: str, reason: str) -> None:
    from tocsin.domain.labels import labels_of_text
    from tocsin.errors import ValidationError

    with pytest.raises(ValidationError) as caught:
        labels_of_text(text, field="labels")
    assert caught.value.field == "labels" and reason in caught.value.reason

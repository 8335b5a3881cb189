"""Issue 40, finding 3: a deeply nested record is a reject with its reason, never a
``RecursionError`` that stops the commands query (and with it, inside ``tocsin up``, every
query) or aborts a whole ``tocsin import``. On both stores."""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path
from typing import TYPE_CHECKING

from tests.pipelines.data import read_rejects
from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.pipelines.bulk_import import run_import
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.pipelines.rows import RowShape, SourceFormat
from tocsin.validation.schedule import Problem

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEEP = ('{"op": "create", "channel": "out", "delay": 60, "payload": '
        + "[" * 100_000 + "]" * 100_000 + "}")
UNCLOSED = '{"channel": "out", "delay": 60, "payload": ' + "[" * 100_000



def test_a_poison_command_is_answered_invalid(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x"))
    now = int(time.time() * 1000)
    good = json.dumps({"op": "create", "channel": "out", "payload": 1, "delay": 60}).encode()
    answers = applier.apply([Message("t", 0, 0, now, DEEP.encode()),
                             Message("t", 0, 1, now, UNCLOSED.encode()),
                             Message("t", 0, 2, now, good)])
    assert [(a.outcome, a.field) for a in answers] == [
        (Outcome.INVALID, "body"), (Outcome.INVALID, "body"), (Outcome.APPLIED, None)]
    assert "nested more than 64 levels" in str(answers[0].reason)


def test_a_poison_line_is_a_reject_of_its_own() -> None:
    shape = RowShape(format=SourceFormat.JSON)
    for line in (DEEP, UNCLOSED):
        problem = shape.item(line, source="a.jsonl")
        assert isinstance(problem, Problem)
        assert problem.field == "body" and "nested more than 64" in problem.reason


def test_a_poison_line_does_not_abort_the_import(spark: SparkSession, backend_url: str,
                                                 store: Store, tmp_path: Path) -> None:
    lines = [json.dumps({"channel": "out", "payload": n, "delay": 3600, "key": f"k{n}"})
             for n in range(20)]
    lines.insert(7, DEEP.replace('"op": "create", ', ""))
    source = tmp_path / "in.jsonl"
    source.write_text("\n".join(lines) + "\n")
    settings = Settings(store=backend_url, home=tmp_path, buckets=16)
    summary = run_import(spark, str(source), settings=settings,
                         rejects=str(tmp_path / "rejects"))
    assert (summary.created, summary.rejected) == (20, 1)
    [reject] = read_rejects(summary.rejects)
    assert reject["field"] == "body" and "nested more than 64" in reject["reason"]
    written = [p for p in Path(summary.rejects).rglob("*") if p.is_file()]  # owner-only
    assert written and {stat.S_IMODE(p.stat().st_mode) for p in written} == {0o600}

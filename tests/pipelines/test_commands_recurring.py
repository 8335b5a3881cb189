"""Issue 42: the commands topic's ``recurring`` op makes a rule as ``POST /v1/recurring`` does,
``every`` (from ``anchor``) and ``jitter`` included; a replayed message finds its rule made.
Applied by the applier on each store, and through the ingest query from a tansu topic."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.pipelines.commands_data import produce
from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.domain import CronTrigger, IntervalTrigger
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.testing.dispatch import wait_until
from tocsin.testing.tansu import Tansu

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ANCHOR_MS = 1_893_456_000_000  # 2030-01-01T00:00:00Z
EVERY = {"op": "recurring", "channel": "out", "payload": {"n": 1}, "every": "PT90M",
         "jitter": "PT5M", "anchor": "2030-01-01T00:00:00Z"}
CRON = {"op": "recurring", "channel": "out", "payload_text": "hi", "cron": "0 9 * * *",
        "timezone": "Europe/Berlin", "jitter": 30, "count": 2}



def _apply(applier: CommandApplier, *bodies: dict[str, Any], first: int = 0) -> list[Any]:
    now = int(time.time() * 1000)
    return applier.apply([Message("t", 0, first + i, now, json.dumps(b).encode())
                          for i, b in enumerate(bodies)])


def test_a_recurring_command_makes_an_interval_rule_with_jitter(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x"))
    every, cron = _apply(applier, EVERY, CRON)
    assert (every.outcome, every.status) == (Outcome.APPLIED, "ACTIVE"), every
    assert every.id.startswith("rec-kafka-") and cron.outcome is Outcome.APPLIED, cron
    rule = store.get_recurring(every.id)
    assert rule.trigger == IntervalTrigger(every_ms=5_400_000, anchor_ms=ANCHOR_MS,
                                           start_ms=None, end_ms=None,
                                           timezone=rule.trigger.timezone)
    assert (rule.jitter_ms, rule.payload) == (300_000, b'{"n":1}')
    made = store.get_recurring(cron.id)
    assert isinstance(made.trigger, CronTrigger) and made.trigger.timezone.key == "Europe/Berlin"
    assert (made.jitter_ms, made.count, made.payload) == (30_000, 2, b"hi")
    again = _apply(applier, EVERY, CRON)  # the same places: a replay
    assert [(a.outcome, a.id) for a in again] == [(Outcome.APPLIED, every.id),
                                                  (Outcome.APPLIED, cron.id)]
    assert len(store.list_recurring()) == 2


def test_a_bad_recurring_command_is_invalid_naming_the_field(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x", ingest_tenant="default"))
    answers = _apply(applier, {**EVERY, "cron": "* * * * *"}, {**EVERY, "jitter": "P2D"},
                     {**EVERY, "channel": "nowhere"}, {**EVERY, "tenant": "acme"},
                     {**EVERY, "every": "soon"}, {k: v for k, v in EVERY.items()
                                                  if k != "payload"},
                     {**EVERY, "flavour": 1})
    assert [(a.outcome, a.field) for a in answers] == [
        (Outcome.INVALID, "every"), (Outcome.INVALID, "jitter"), (Outcome.INVALID, "channel"),
        (Outcome.INVALID, "tenant"), (Outcome.INVALID, "every"), (Outcome.INVALID, "payload"),
        (Outcome.INVALID, "flavour")], answers
    assert store.list_recurring() == []


def test_the_rule_cap_holds_on_the_topic(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x", tenant_max_recurring=1))
    first, second = _apply(applier, EVERY, CRON)
    assert first.outcome is Outcome.APPLIED
    assert (second.outcome, second.field) == (Outcome.REFUSED, "tenant"), second
    assert len(store.list_recurring()) == 1


@pytest.mark.spark
def test_recurring_commands_through_the_ingest_query(spark: SparkSession, kafka: Tansu,
                                                     store: Store, backend_url: str,
                                                     tmp_path: Path) -> None:
    from tocsin.pipelines.ingest import start_ingest

    topic = f"commands-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, 1)
    kafka.create_topic(f"{topic}.rejects", 1)
    produce(kafka.bootstrap, topic, [("a", json.dumps(EVERY).encode()),
                                     ("a", json.dumps(CRON).encode())])
    settings = Settings(store=backend_url, home=tmp_path, buckets=16, ingest_topic=topic,
                        ingest_bootstrap=kafka.bootstrap)
    query = start_ingest(spark, settings, trigger_seconds=0.5)
    try:
        rules = wait_until(lambda: len(found := store.list_recurring()) == 2 and found,
                           timeout_s=120, what="two rules from the topic")
    finally:
        query.stop()
    by_jitter = {r.jitter_ms: r for r in rules}
    assert isinstance(by_jitter[300_000].trigger, IntervalTrigger)
    assert by_jitter[300_000].trigger.every_ms == 5_400_000
    assert isinstance(by_jitter[30_000].trigger, CronTrigger)


def test_import_recurring_reads_rules_from_json_lines(store: Store, backend_url: str,
                                                      tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from tocsin.cli.app import app

    rules = tmp_path / "rules.jsonl"
    lines = [{k: v for k, v in EVERY.items() if k != "op"}, {**CRON, "tenant": "default"},
             {**EVERY, "op": "create"}, {**EVERY, "jitter": -1}]
    rules.write_text("\n".join(json.dumps(x) for x in lines) + "\n\n{not json\n")
    for _ in range(2):  # the second run finds every rule made: nothing new
        ran = CliRunner().invoke(app, ["--json", "import", "--recurring", str(rules),
                                       "--store", backend_url])
        assert ran.exit_code == 0, ran.output
        summary = json.loads(ran.output)
        assert (summary["rules"], summary["invalid"]) == (2, 3), summary
        assert [(p["line"], p["field"]) for p in summary["problems"]] == [
            (3, "op"), (4, "jitter"), (6, "body")]
    made = store.list_recurring()
    assert len(made) == 2 and {r.jitter_ms for r in made} == {300_000, 30_000}
    assert {r.trigger.every_ms for r in made if isinstance(r.trigger, IntervalTrigger)} == {
        5_400_000}

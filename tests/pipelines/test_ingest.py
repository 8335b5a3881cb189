"""The Kafka commands topic (tansu) into each store: every command applied once, whatever is
replayed."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.pipelines.commands_data import (
    make_commands,
    produce,
    stored_state,
    wait_for_state,
)
from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.testing.dispatch import wait_until
from tocsin.testing.tansu import Tansu, read_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PARTITIONS = 4



def test_commands_apply_once(store: Store) -> None:
    """Applied, then replayed whole: the store equals applying each command once; a bad
    command is invalid with its reason, a cancel of a cancelled schedule is applied."""
    commands = make_commands(2_000)
    now = int(time.time() * 1000)
    messages = [Message("t", 0, i, now, value) for i, (_, value) in enumerate(commands.messages)]
    applier = CommandApplier(store, Settings(store="x"))
    first = applier.apply(messages)
    assert stored_state(store) == commands.expected
    assert sum(a.outcome is Outcome.INVALID for a in first) == commands.bad
    assert all(a.field == "body" and a.reason for a in first if a.outcome is Outcome.INVALID)
    again = applier.apply(messages)
    assert stored_state(store) == commands.expected
    # a create answers the same schedule (a reschedule replayed after its later cancel is
    # refused this time: the store is the same either way)
    assert [a.id for a in again if a.op == "create"] == [a.id for a in first if a.op == "create"]


def _mixed(rng: random.Random, n: int, tenant: str) -> list[bytes]:
    """Creates, cancels and reschedules by key over a few keys, so that they collide: a cancel
    before its create, a key given to two requests, a reschedule of a cancelled one."""
    out = []
    for _ in range(n):
        key, roll = f"k-{rng.randrange(60)}", rng.random()
        if roll < 0.5:
            body: dict[str, Any] = {"op": "create", "channel": "out", "delay": 86_400,
                                    "payload": {"v": rng.randrange(2)}, "key": key}
        elif roll < 0.75:
            body = {"op": "cancel", "key": key}
        else:
            body = {"op": "reschedule", "key": key, "payload": {"v": 9}}
        out.append(json.dumps(body | {"tenant": tenant}).encode())
    return out


def _by_key(store: Store, tenant: str) -> dict[str, tuple[str, Any]]:
    return {s.key or "": (s.status.value, json.loads(s.payload))
            for s in store.list_schedules(tenant=tenant, limit=1_000)}


@pytest.mark.parametrize("seed", range(6))
def test_a_batch_ends_as_its_commands_one_by_one(store: Store, seed: int) -> None:
    """A batch applied whole (creates written together, then the changes) leaves the store
    and answers exactly as its commands applied one at a time, in order."""
    rng = random.Random(seed)
    for tenant in ("whole", "single"):
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant=tenant))
    now = int(time.time() * 1000)
    appliers = {tenant: CommandApplier(store, Settings(store="x", ingest_tenant=tenant))
                for tenant in ("whole", "single")}  # a topic each
    size = rng.choice([20, 60, 200])
    for start in range(0, 400, size):
        values = _mixed(rng, size, "T")
        whole = appliers["whole"].apply([Message("t", 0, start + i, now,
                                                 v.replace(b'"T"', b'"whole"'))
                                         for i, v in enumerate(values)])
        single = [appliers["single"].apply([Message("t", 0, start + i, now,
                                                    v.replace(b'"T"', b'"single"'))])[0]
                  for i, v in enumerate(values)]
        assert [(a.op, a.outcome, a.status, a.field) for a in whole] == [
            (a.op, a.outcome, a.status, a.field) for a in single]
    assert _by_key(store, "whole") == _by_key(store, "single")
    assert {status for status, _ in _by_key(store, "whole").values()} == {"PENDING",
                                                                        "CANCELLED"}


def test_command_errors(store: Store) -> None:
    """Refusals and invalid commands name the field and the reason."""
    applier = CommandApplier(store, Settings(store="x"))
    now = int(time.time() * 1000)
    bodies = [b'{"op": "drop"}', b'{"op": "create", "channel": "nowhere", "payload": 1, '
              b'"delay": 5}', b'{"op": "cancel", "key": "missing"}',
              b'{"op": "cancel", "id": "x", "key": "y"}',
              b'{"op": "reschedule", "key": "missing", "delay": -1}']
    answers = applier.apply([Message("t", 0, i, now, b) for i, b in enumerate(bodies)])
    assert [(a.outcome, a.field) for a in answers] == [
        (Outcome.INVALID, "op"), (Outcome.INVALID, "channel"), (Outcome.REFUSED, "key"),
        (Outcome.INVALID, "id"), (Outcome.INVALID, "delay")]


def test_text_the_store_cannot_hold_is_invalid(store: Store) -> None:
    """A lone surrogate or a NUL (JSON escapes) is refused naming the field, as by the API."""
    applier = CommandApplier(store, Settings(store="x"))
    now = int(time.time() * 1000)
    bodies = [rb'{"op": "create", "channel": "out", "payload_text": "a\ud800", "delay": 5}',
              rb'{"op": "create", "channel": "out", "payload": 1, "delay": 5, "key": "a\u0000"}',
              rb'{"op": "create", "channel": "out", "payload_text": "\ud83d\ude00", "delay": 5}']
    answers = applier.apply([Message("t", 0, i, now, b) for i, b in enumerate(bodies)])
    assert [(a.outcome, a.field) for a in answers] == [
        (Outcome.INVALID, "payload_text"), (Outcome.INVALID, "key"), (Outcome.APPLIED, None)]


def test_ingest_query(spark: SparkSession, kafka: Tansu, store: Store, backend_url: str,
                      tmp_path: Path) -> None:
    """2 000 commands over 4 partitions through the streaming query; bad ones on the rejects
    topic; a restart from the checkpoint changes nothing."""
    from tocsin.pipelines.ingest import start_ingest

    topic = f"commands-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, PARTITIONS)
    kafka.create_topic(f"{topic}.rejects", 1)
    commands = make_commands(2_000)
    produce(kafka.bootstrap, topic, commands.messages)
    settings = Settings(store=backend_url, home=tmp_path, buckets=16, ingest_topic=topic,
                        ingest_bootstrap=kafka.bootstrap, ingest_max_per_batch=700)
    for _ in range(2):
        query = start_ingest(spark, settings, trigger_seconds=0.5)
        try:
            assert wait_for_state(store, commands.expected, timeout_s=120) == commands.expected
        finally:
            query.stop()
    rejects = read_topic(kafka.bootstrap, f"{topic}.rejects", 1, expect=commands.bad)
    assert len(rejects) == commands.bad
    assert b'"reason": "malformed JSON' in rejects[0].value()


def _ingest(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "tocsin", "ingest"], env=env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def _kill_and_restart(kafka: Tansu, store: Store, backend_url: str, tmp_path: Path,
                      total: int, say: Callable[[str], None]) -> None:
    topic = f"commands-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic, PARTITIONS)
    kafka.create_topic(f"{topic}.rejects", 1)
    commands = make_commands(total)
    produce(kafka.bootstrap, topic, commands.messages)
    env = {**os.environ, "TOCSIN_HOME": str(tmp_path), "TOCSIN_STORE": backend_url,
           "TOCSIN_BUCKETS": "16", "TOCSIN_SPARK_MASTER": "local[*]",
           "TOCSIN_INGEST_TOPIC": topic, "TOCSIN_INGEST_BOOTSTRAP": kafka.bootstrap,
           "TOCSIN_INGEST_MAX_PER_BATCH": str(max(500, total // 20)),
           "TOCSIN_TRIGGER_SECONDS": "0.5"}
    proc = _ingest(env, tmp_path / "ingest.log")
    try:
        def a_quarter_applied() -> bool:
            assert proc.poll() is None, (tmp_path / "ingest.log").read_text()[-3000:]
            return len(stored_state(store)) >= len(commands.expected) // 4

        wait_until(a_quarter_applied, timeout_s=180, what="a quarter of the commands applied")
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        seen = len(stored_state(store))
        say(f"kill -9 after {seen} of {len(commands.expected)} schedules")
        assert seen < len(commands.expected), "killed too late: everything was applied"
        proc = _ingest(env, tmp_path / "ingest.log")
        state = wait_for_state(store, commands.expected, timeout_s=600)
        assert state == commands.expected
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@pytest.mark.spark  # a `tocsin ingest` process: Spark
@pytest.mark.smaller_twin("test_kill9_mid_stream_100k")
def test_kill9_mid_stream(kafka: Tansu, store: Store, backend_url: str, tmp_path: Path,
                          say: Callable[[str], None]) -> None:
    """4 000 commands; the ingest process is killed (-9) mid-stream and started again: the
    store equals applying each command once."""
    _kill_and_restart(kafka, store, backend_url, tmp_path, 4_000, say)


@pytest.mark.slow
@pytest.mark.parametrize("backend_url", ["postgres"], indirect=True)
def test_kill9_mid_stream_100k(kafka: Tansu, store: Store, backend_url: str, tmp_path: Path,
                               say: Callable[[str], None]) -> None:
    """The same with 100 000 commands, into PostgreSQL (the store a Kafka-fed deployment
    runs on). SQLite takes the 4 000 of its twin: the commands are applied by the same
    statements over both dialects (``tocsin.stores.sql``), which the tests above run on both."""
    _kill_and_restart(kafka, store, backend_url, tmp_path, 100_000, say)

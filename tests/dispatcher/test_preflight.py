"""A machine without a channel's client library says so: the dispatcher starts and holds that
destination, naming the kind and what to install, and a registration is refused, rather than
each schedule failing at delivery or one tenant's channel stopping every dispatcher start."""

from __future__ import annotations

import signal
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tocsin.channels import missing_library, validate_channel_config
from tocsin.cli import app
from tocsin.cli import output as cli_output
from tocsin.clock import SystemClock
from tocsin.dispatcher.preflight import undeliverable_channels
from tocsin.domain import ChannelKind, ChannelSpec, HoldReason, NewSchedule, Status
from tocsin.errors import ValidationError
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer
from tocsin.testing.dispatch import wait_until
from tocsin.testing.processes import kill_tree, start_tocsin

KAFKA = {"bootstrap_servers": "127.0.0.1:9", "topic": "orders"}
RABBIT = {"url": "amqp://127.0.0.1:9/", "routing_key": "jobs"}


def _store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    store.put_channel(ChannelSpec(name="orders", kind=ChannelKind.KAFKA, config=KAFKA))
    store.put_channel(ChannelSpec(name="jobs", tenant="acme", kind=ChannelKind.RABBITMQ,
                                  config=RABBIT))
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": "o"}))
    return store


@pytest.mark.spark
def test_a_kind_this_machine_lacks_holds_its_destination_not_the_dispatcher(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One tenant's channel of a plug-in kind not installed here: the real dispatcher starts,
    delivers the other tenant's schedules, and holds that destination's (PENDING, no attempt
    spent), its hold naming the kind, in the store, ``tocsin status`` and the log."""
    out = tmp_path / "out.jsonl"
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    store.put_channel(ChannelSpec(name="p", tenant="acme", kind=ChannelKind("acme_queue"),
                                  config={}))
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": str(out)}))
    now = SystemClock().now_ms()
    held = {s.id for s, _ in store.create(
        [NewSchedule(channel="p", tenant="acme", payload=b"{}", due_ms=now)] * 3, now_ms=now)}
    sent = {s.id for s, _ in store.create(
        [NewSchedule(channel="out", payload=b"{}", due_ms=now)] * 3, now_ms=now)}
    log = tmp_path / "dispatcher.log"
    proc = start_tocsin("dispatcher", log=log, env={
        "TOCSIN_STORE": f"sqlite:///{tmp_path / 't.db'}", "TOCSIN_HOME": str(tmp_path),
        "TOCSIN_CHECKPOINT": str(tmp_path / "ck"), "TOCSIN_BUCKETS": "4",
        "TOCSIN_PARTITIONS": "1", "TOCSIN_SPARK_MASTER": "local[1]",
        "TOCSIN_TRIGGER_SECONDS": "0.5"})
    try:
        def delivered() -> bool:
            assert proc.poll() is None, log.read_text()[-3000:]  # it did not stop
            return all(store.get(i).status is Status.DELIVERED for i in sent)

        wait_until(delivered, timeout_s=240, what="the file channel's schedules delivered")
        time.sleep(3)  # a few more batches: the held rows stay held
        for i in held:
            schedule = store.get(i)
            assert schedule.status is Status.PENDING and schedule.attempts == 0
        [hold] = [h for h in store.channel_holds() if h.tenant == "acme"]
        assert (hold.name, hold.reason) == ("p", HoldReason.UNDELIVERABLE)
        assert "acme_queue channels come from a plug-in that is not installed here" in (
            hold.last_error or "")
        assert "cannot deliver to acme/p: acme_queue channels" in log.read_text()
        served = ApiServer(store).start()
        try:
            monkeypatch.setenv("TOCSIN_API_KEY", served.admin_key)
            monkeypatch.setenv("TOCSIN_API_URL", served.url)
            monkeypatch.setattr(cli_output, "_is_terminal", lambda: True)
            monkeypatch.setenv("COLUMNS", "400")  # one line a hold
            status = CliRunner().invoke(app, ["status"])
        finally:
            served.stop()
            cli_output.set_json(False)
        assert status.exit_code == 0, status.output
        assert "acme/p: undeliverable here (acme_queue channels come from a plug-in" in (
            " ".join(status.output.split()))
    finally:
        kill_tree(proc, signal.SIGTERM)
        store.close()


@pytest.mark.parametrize(("module", "kind", "config", "extra"), [
    ("confluent_kafka", ChannelKind.KAFKA, KAFKA, "kafka"),
    ("pika", ChannelKind.RABBITMQ, RABBIT, "rabbitmq")])
def test_each_kind_names_its_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     module: str, kind: ChannelKind, config: dict[str, str],
                                     extra: str) -> None:
    store = _store(tmp_path)
    assert undeliverable_channels(store) == {}
    assert validate_channel_config(kind, config)
    monkeypatch.setitem(sys.modules, module, None)
    lacking = missing_library(kind)
    assert lacking is not None and f"pip install 'tocsin[{extra}]'" in lacking
    name = ("default", "orders") if kind is ChannelKind.KAFKA else ("acme", "jobs")
    assert undeliverable_channels(store) == {name: lacking}
    with pytest.raises(ValidationError) as refused:  # the API answers 422 naming `kind`
        validate_channel_config(kind, config)
    assert refused.value.field == "kind" and extra in str(refused.value)
    assert missing_library(ChannelKind.WEBHOOK) is None
    assert missing_library(ChannelKind.FILE) is None


@pytest.mark.parametrize(("module", "kind", "config", "extra"), [
    ("boto3", ChannelKind.SQS, {"queue_url": "http://127.0.0.1:9/1/q"}, "sqs"),
    ("redis", ChannelKind.REDIS_STREAMS, {"url": "redis://127.0.0.1:9/0", "stream": "s"},
     "redis"),
    ("nats", ChannelKind.NATS, {"servers": "nats://127.0.0.1:9", "subject": "s"}, "nats")])
def test_the_new_kinds_name_their_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                          module: str, kind: ChannelKind,
                                          config: dict[str, str], extra: str) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    store.put_channel(ChannelSpec(name="new", kind=kind, config=config))
    assert undeliverable_channels(store) == {}
    assert validate_channel_config(kind, config)
    monkeypatch.setitem(sys.modules, module, None)
    lacking = missing_library(kind)
    assert lacking is not None and f"pip install 'tocsin[{extra}]'" in lacking
    assert undeliverable_channels(store) == {("default", "new"): lacking}
    with pytest.raises(ValidationError) as refused:
        validate_channel_config(kind, config)
    assert refused.value.field == "kind"
    store.close()


def test_a_plugin_kind_not_installed_is_named(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    store.put_channel(ChannelSpec(name="p", kind=ChannelKind("acme_queue"), config={}))
    [(where, line)] = undeliverable_channels(store).items()
    assert where == ("default", "p")
    assert line.startswith("acme_queue channels come from a plug-in")
    assert "entry point is 'acme_queue'" in line
    store.close()


def test_the_look_reads_only_the_channels_of_kinds_missing_here(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every few seconds each dispatcher looks: beside many channels of kinds it can deliver
    to, it reads their kinds, not the channels themselves."""
    store = _store(tmp_path)
    for i in range(50):
        store.put_channel(ChannelSpec(name=f"hook{i}", tenant=f"t{i % 5}",
                                      kind=ChannelKind.WEBHOOK,
                                      config={"url": "http://127.0.0.1:9/h"}))
    assert store.channel_kinds() == {"kafka", "rabbitmq", "file", "webhook"}
    read: list[ChannelSpec] = []
    listed = store.list_channels

    def counted(**kwargs: object) -> list[ChannelSpec]:
        found = listed(**kwargs)  # type: ignore[arg-type]
        read.extend(found)
        return found

    monkeypatch.setattr(store, "list_channels", counted)
    assert undeliverable_channels(store) == {}
    assert read == []
    monkeypatch.setitem(sys.modules, "pika", None)
    assert set(undeliverable_channels(store)) == {("acme", "jobs")}
    assert [(s.tenant, s.name) for s in read] == [("acme", "jobs")]
    store.close()

"""A machine without a channel's client library says so before anything runs: the dispatcher
refuses to start naming the channel and what to install, and a registration is refused, rather
than each schedule failing at delivery."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from tocsin.channels import missing_library, validate_channel_config
from tocsin.dispatcher.preflight import undeliverable_channels
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.errors import ValidationError
from tocsin.stores.sqlite import SQLiteStore

KAFKA = {"bootstrap_servers": "127.0.0.1:9", "topic": "orders"}
RABBIT = {"url": "amqp://127.0.0.1:9/", "routing_key": "jobs"}
# `tocsin dispatcher` in a Python that cannot import confluent-kafka (as if it were not installed)
HIDDEN_KAFKA = ("import sys; sys.modules['confluent_kafka'] = None; "
                "sys.argv = ['tocsin', 'dispatcher']; from tocsin.cli import main; main()")


def _store(tmp_path: Path) -> SQLiteStore:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    store.put_channel(ChannelSpec(name="orders", kind=ChannelKind.KAFKA, config=KAFKA))
    store.put_channel(ChannelSpec(name="jobs", tenant="acme", kind=ChannelKind.RABBITMQ,
                                  config=RABBIT))
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, config={"path": "o"}))
    return store


def test_the_dispatcher_refuses_to_start_without_a_channels_library(tmp_path: Path) -> None:
    _store(tmp_path).close()
    env = {"TOCSIN_STORE": f"sqlite:///{tmp_path / 't.db'}", "TOCSIN_HOME": str(tmp_path),
           "PATH": "", "SPARK_LOCAL_IP": "127.0.0.1"}
    began = time.monotonic()
    done = subprocess.run([sys.executable, "-c", HIDDEN_KAFKA], env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 1, done.stderr
    assert ("tocsin dispatcher: refusing to start: channel default/orders: kafka channels need "
            "confluent-kafka, which is not installed here: pip install 'tocsin[kafka]' "
            "(or 'tocsin[all]')") in done.stderr
    assert "acme/jobs" not in done.stderr and "default/out" not in done.stderr  # pika is here
    assert not (tmp_path / "checkpoint").exists()  # Spark never started
    assert time.monotonic() - began < 60


@pytest.mark.parametrize(("module", "kind", "config", "extra"), [
    ("confluent_kafka", ChannelKind.KAFKA, KAFKA, "kafka"),
    ("pika", ChannelKind.RABBITMQ, RABBIT, "rabbitmq")])
def test_each_kind_names_its_library(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                     module: str, kind: ChannelKind, config: dict[str, str],
                                     extra: str) -> None:
    store = _store(tmp_path)
    assert undeliverable_channels(store) == []
    assert validate_channel_config(kind, config)
    monkeypatch.setitem(sys.modules, module, None)
    lacking = missing_library(kind)
    assert lacking is not None and f"pip install 'tocsin[{extra}]'" in lacking
    name = "default/orders" if kind is ChannelKind.KAFKA else "acme/jobs"
    assert undeliverable_channels(store) == [f"channel {name}: {lacking}"]
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
    assert undeliverable_channels(store) == []
    assert validate_channel_config(kind, config)
    monkeypatch.setitem(sys.modules, module, None)
    lacking = missing_library(kind)
    assert lacking is not None and f"pip install 'tocsin[{extra}]'" in lacking
    assert undeliverable_channels(store) == [f"channel default/new: {lacking}"]
    with pytest.raises(ValidationError) as refused:
        validate_channel_config(kind, config)
    assert refused.value.field == "kind"
    store.close()


def test_a_plugin_kind_not_installed_stops_the_dispatcher_naming_it(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    store.put_channel(ChannelSpec(name="p", kind=ChannelKind("acme_queue"), config={}))
    [line] = undeliverable_channels(store)
    assert line.startswith("channel default/p: acme_queue channels come from a plug-in")
    assert "entry point is 'acme_queue'" in line
    store.close()

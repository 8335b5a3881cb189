"""Issue 40, finding 2: the broker policy reads broker addresses exactly as the client
libraries do, and fails closed.

The oracles are the libraries themselves: librdkafka (through confluent-kafka, its debug log
names every bootstrap broker it adds) and ``pika.URLParameters``. Only loopback literals and
``.invalid`` names appear, so nothing leaves this machine.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tocsin.channels import resolver
from tocsin.channels.addresses import amqp_host, check_broker, check_host, kafka_hosts
from tocsin.channels.kafka import KafkaChannel
from tocsin.channels.options import check_amqp_url
from tocsin.channels.policy import DestinationPolicy
from tocsin.channels.resolver import UnresolvedName, resolve
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.errors import ValidationError

_ADDED = re.compile(r"\[thrd:app\]: (?:\w+://)?(.+):(\d+)/bootstrap: Added new broker")


def _librdkafka_hosts(servers: str) -> list[str]:
    """The hosts librdkafka itself adds for ``servers`` (from its debug log)."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    lines: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record.getMessage())

    log = logging.getLogger(f"test-librdkafka-{id(lines)}")
    log.addHandler(Collect())
    log.setLevel(logging.DEBUG)
    protocol = servers.split("://", 1)[0].strip().lower() if "://" in servers else "plaintext"
    producer = confluent_kafka.Producer({
        "bootstrap.servers": servers, "debug": "broker", "logger": log,
        "security.protocol": protocol if protocol != "plaintext" else "plaintext",
        "sasl.mechanisms": "PLAIN", "sasl.username": "u", "sasl.password": "p",
        "enable.sparse.connections": True, "reconnect.backoff.ms": 600_000,
        "reconnect.backoff.max.ms": 600_000})
    producer.poll(0.2)
    hosts = []
    for line in lines:
        if m := _ADDED.search(line):
            hosts.append(m.group(1).strip("[]").lower())
    return hosts


@pytest.fixture
def strict(tmp_path: Path) -> DestinationPolicy:
    return DestinationPolicy.build(file_roots=[tmp_path])


@pytest.mark.parametrize("servers", [
    "PLAINTEXT://127.0.0.1:9092", "plaintext://127.0.0.2:1,PLAINTEXT://127.0.0.3:2",
    "127.0.0.1:9092, 127.0.0.4:9093", "[::1]:9092", "::1", "[fe80::1]", "broker.invalid",
    "a.invalid:4, b.invalid:5", ",,127.0.0.9:1,",
])
def test_kafka_hosts_agree_with_librdkafka(servers: str) -> None:
    assert kafka_hosts(servers) == _librdkafka_hosts(servers)


@pytest.mark.parametrize("servers", [
    "SSL://127.0.0.1:9093", "SASL_PLAINTEXT://127.0.0.1:9094", "sasl_ssl://[::1]:9095",
])
def test_each_security_protocol_prefix_agrees_with_librdkafka(servers: str) -> None:
    assert kafka_hosts(servers) == _librdkafka_hosts(servers)


@pytest.mark.parametrize("servers", [
    "FOO://127.0.0.1:1", "plaintext://", "x.invalid:1 y.invalid:2", "127.0.0.3:1:2",
    "[::1]:7:8", "[::1", "h.invalid:99999", "ssl://a.invalid:1/x", "h\t.invalid", "",
])
def test_what_librdkafka_would_read_otherwise_is_refused(servers: str,
                                                         strict: DestinationPolicy) -> None:
    with pytest.raises(ValidationError) as refused:
        check_broker(servers, strict, field="config.bootstrap_servers")
    assert refused.value.field == "config.bootstrap_servers"


@pytest.mark.parametrize("servers", [
    "PLAINTEXT://127.0.0.1:9092", "SSL://127.0.0.1:9092", "SASL_PLAINTEXT://127.0.0.1:9092",
    "SASL_SSL://[::1]:9092", "h.invalid:1,PLAINTEXT://127.0.0.1:9092",
])
def test_a_prefixed_loopback_broker_is_refused(servers: str, strict: DestinationPolicy) -> None:
    with pytest.raises(ValidationError, match=r"loopback|does not resolve"):
        check_broker(servers, strict, field="config.bootstrap_servers")


def test_a_prefixed_loopback_broker_is_refused_at_delivery_too(
        strict: DestinationPolicy) -> None:
    spec = ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": "PLAINTEXT://127.0.0.1:9092", "topic": "t"})
    with pytest.raises(ValidationError, match="loopback"):
        KafkaChannel(spec, policy=strict)


@pytest.mark.parametrize("url", [
    "amqp://u:p\\@10.1.2.3/", "amqp://guest:guest@127.0.0.1:5672/%2f", "amqps://[::1]/",
    "amqp://", "amqp://u:p@LOCALHOST.:5/v", "amqp://a:b@c@127.0.0.5/",
])
def test_amqp_hosts_agree_with_pika(url: str) -> None:
    pika = pytest.importorskip("pika")
    assert amqp_host(url) == pika.URLParameters(url).host


@pytest.mark.parametrize("url", ["amqp://u:p\\@10.1.2.3/", "amqp://a:b@c@10.0.0.5/",
                                 "amqp://u:p\\@[fd00::1]:5672/"])
def test_an_amqp_url_is_judged_by_the_host_pika_reaches(url: str, tmp_path: Path) -> None:
    """Loopback allowed (``tocsin up``): the URL used to be judged as ``localhost``."""
    embedded = DestinationPolicy.build(file_roots=[tmp_path], allow_loopback=True)
    check_amqp_url("amqp://guest:guest@localhost:5672/%2f", embedded)
    with pytest.raises(ValidationError, match="private") as refused:
        check_amqp_url(url, embedded)
    assert refused.value.field == "config.url"


def test_a_name_that_does_not_resolve_is_refused(strict: DestinationPolicy) -> None:
    for check in (lambda: check_broker("nowhere.invalid:9092", strict, field="f"),
                  lambda: check_host("nowhere.invalid", strict, field="f")):
        with pytest.raises(ValidationError, match="does not resolve"):
            check()


def test_a_lookup_past_its_deadline_is_refused() -> None:
    release = threading.Event()

    def hangs(*_: Any, **__: Any) -> list[Any]:
        release.wait(30)
        raise OSError("gave up")

    try:
        begun = time.monotonic()
        with pytest.raises(UnresolvedName, match=r"within 0\.2 s"):
            resolve("slow.invalid", deadline_s=0.2, lookup=hangs)
        assert time.monotonic() - begun < 5
    finally:
        release.set()


def test_hanging_lookups_never_let_a_later_name_pass(monkeypatch: pytest.MonkeyPatch,
                                                     strict: DestinationPolicy) -> None:
    """Every slot held by a hanging lookup: the next name is refused, not waved through."""
    release = threading.Event()

    def hangs(*_: Any, **__: Any) -> list[Any]:
        release.wait(30)
        raise OSError("gave up")

    try:
        for n in range(resolver.MAX_LOOKUPS):
            with pytest.raises(UnresolvedName):
                resolve(f"hang{n}.invalid", deadline_s=0.01, lookup=hangs)
        with pytest.raises(UnresolvedName, match="lookups are already under way"):
            resolve("localhost", deadline_s=0.01)
        monkeypatch.setattr(resolver, "RESOLVE_TIMEOUT_S", 0.01)
        with pytest.raises(ValidationError):
            check_broker("broker.example:9092", strict, field="config.bootstrap_servers")
    finally:
        release.set()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the slots come back as the lookups end
        try:
            assert resolve("localhost")
            break
        except UnresolvedName:
            time.sleep(0.05)
    else:
        pytest.fail("the slots never came back")

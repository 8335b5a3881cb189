"""Channel configurations are checked at registration and name the bad field."""

from __future__ import annotations

import pytest

from tests.channels.envelopes import SECRET
from tocsin.channels import validate_channel_config
from tocsin.domain import ChannelKind
from tocsin.errors import ValidationError


@pytest.mark.parametrize(("kind", "config", "field"), [
    (ChannelKind.WEBHOOK, {}, "config.url"),
    (ChannelKind.WEBHOOK, {"url": "ftp://x"}, "config.url"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "timeout": "fast"}, "config.timeout"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "concurrency": 0}, "config.concurrency"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "colour": 1}, "config.colour"),
    (ChannelKind.KAFKA, {"bootstrap_servers": "h:1", "topic": " "}, "config.topic"),
    (ChannelKind.FILE, {"path": 3}, "config.path"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "secret": ""}, "config.secret"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "timeout": 0}, "config.timeout"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "headers": {"a": 1}}, "config.headers"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "concurrency": True}, "config.concurrency"),
    (ChannelKind.WEBHOOK, {"url": "http://"}, "config.url"),
    (ChannelKind.KAFKA, {"topic": "t"}, "config.bootstrap_servers"),
    (ChannelKind.KAFKA, {"bootstrap_servers": "h:1"}, "config.topic"),
    (ChannelKind.KAFKA, {"bootstrap_servers": "h:1", "topic": "t", "producer": []},
     "config.producer"),
    (ChannelKind.KAFKA, {"bootstrap_servers": "h:1", "topic": "t",
                         "producer": {"bootstrap.servers": "other:1"}}, "config.producer"),
    (ChannelKind.KAFKA, {"bootstrap_servers": "h:1", "topic": "t", "flush_timeout": -1},
     "config.flush_timeout"),
    (ChannelKind.RABBITMQ, {"routing_key": "q"}, "config.url"),
    (ChannelKind.RABBITMQ, {"url": "http://h", "routing_key": "q"}, "config.url"),
    (ChannelKind.RABBITMQ, {"url": "amqp://h"}, "config.routing_key"),
    (ChannelKind.RABBITMQ, {"url": "amqp://h", "routing_key": "q", "declare_queue": "yes"},
     "config.declare_queue"),
    (ChannelKind.FILE, {"fsync": 1}, "config.fsync"),
    (ChannelKind.RECORDING, {"fail": "sometimes"}, "config.fail"),
    (ChannelKind.RECORDING, {"fail": "retry", "fail_rate": 1.5}, "config.fail_rate"),
    (ChannelKind.RECORDING, {"fail": "retry", "fail_first": -1}, "config.fail_first"),
    (ChannelKind.RECORDING, {"seed": "x"}, "config.seed"),
    (ChannelKind.RECORDING, {"max_attempts": 0}, "config.max_attempts"),
    (ChannelKind.RECORDING, {"on_dead": "explode"}, "config.on_dead"),
    (ChannelKind.RECORDING, {"dead_letter": 5}, "config.dead_letter"),
])
def test_bad_config_names_the_field(kind: ChannelKind, config: dict[str, object],
                                    field: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate_channel_config(kind, config)
    assert err.value.field == field


def test_good_configs_pass_unchanged() -> None:
    good: list[tuple[ChannelKind, dict[str, object]]] = [
        (ChannelKind.WEBHOOK, {"url": "https://127.0.0.1/x", "secret": SECRET, "timeout": 2,
                               "headers": {"a": "b"}, "concurrency": 4}),
        (ChannelKind.KAFKA, {"bootstrap_servers": "127.0.0.1:1", "topic": "t",
                             "producer": {"linger.ms": 20}, "dead_letter": "dlq"}),
        (ChannelKind.RABBITMQ, {"url": "amqp://127.0.0.1", "routing_key": "q",
                                "exchange": "x"}),
        (ChannelKind.RECORDING, {"fail": "retry", "fail_rate": 0.5, "seed": 3}),
        (ChannelKind.RECORDING, {}),
    ]
    for kind, config in good:
        assert validate_channel_config(kind, config) == config


def test_an_unknown_kind_names_the_field() -> None:
    with pytest.raises(ValidationError) as err:
        validate_channel_config("carrier-pigeon", {})  # type: ignore[arg-type]
    assert err.value.field == "kind"


def test_importing_tocsin_imports_no_transport() -> None:
    import subprocess
    import sys

    code = ("import sys, tocsin, tocsin.channels, tocsin.abc, tocsin.domain, "
            "tocsin.channels.plugins; from tocsin.domain import ChannelKind; "
            "ChannelKind('example_lines'); "
            "print(sorted(m for m in ('confluent_kafka', 'pika', 'httpx', 'aiohttp', 'pyspark', "
            "'boto3', 'botocore', 'redis', 'nats', 'tocsin_example_channel')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"

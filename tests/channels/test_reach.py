"""Channels that reach anything (security review, round two): Kafka and RabbitMQ brokers are
under the destination policy (``broker_allow``), at registration and when a dispatcher builds
the channel; a RabbitMQ connection failure reads the same for an open and a closed port; a
webhook host is judged as the address the HTTP client connects to (Unicode digits and
ideographic dots normalised first), at registration and at delivery."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels import validate_channel_config
from tocsin.channels.kafka import KafkaChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.channels.rabbitmq import CONNECT_FAILED, RabbitMQChannel
from tocsin.channels.webhook import WebhookChannel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.testing.receiver import Receiver

STRICT = DestinationPolicy.build(file_roots=["/tmp/tocsin-reach"])
BROKERS_OPEN = DestinationPolicy.build(file_roots=["/tmp/tocsin-reach"],
                                       broker_allow=["127.0.0.0/8", "::1", "10.0.0.0/8"])

NON_PUBLIC = ["169.254.169.254:80", "127.0.0.1:22", "localhost:9092", "[::1]:9092",
              "10.0.0.5:9092", "0.0.0.0:9092", "2130706433:80", "0x7f.1:9092",
              "[::ffff:127.0.0.1]:9092", "public.example:9092,127.0.0.1:9092",
              "\uff11\uff12\uff17.\uff10.\uff10.\uff11:9092", "127\u30020\u30020\u30021:9092"]


@pytest.mark.parametrize("servers", NON_PUBLIC)
def test_kafka_brokers_are_under_the_policy(servers: str) -> None:
    config = {"bootstrap_servers": servers, "topic": "t"}
    with pytest.raises(ValidationError) as refused:
        validate_channel_config(ChannelKind.KAFKA, config, STRICT)
    assert refused.value.field == "config.bootstrap_servers"
    assert "broker_allow" in refused.value.reason or "not a host name" in refused.value.reason
    with pytest.raises(ValidationError):  # a dispatcher checks again when it builds it
        KafkaChannel(ChannelSpec(name="k", kind=ChannelKind.KAFKA, config=config),
                     policy=STRICT)


@pytest.mark.parametrize("host", ["169.254.169.254", "127.0.0.1", "localhost", "[::1]",
                                  "10.1.2.3", "2130706433", "\uff11\uff12\uff17.0.0.1"])
def test_rabbitmq_brokers_are_under_the_policy(host: str) -> None:
    config = {"url": f"amqp://guest:guest@{host}:5672/%2F", "routing_key": "q"}
    with pytest.raises(ValidationError) as refused:
        validate_channel_config(ChannelKind.RABBITMQ, config, STRICT)
    assert refused.value.field == "config.url" and "broker_allow" in refused.value.reason
    with pytest.raises(ValidationError):
        RabbitMQChannel(ChannelSpec(name="r", kind=ChannelKind.RABBITMQ, config=config),
                        policy=STRICT)


def test_broker_allow_lets_listed_brokers_through() -> None:
    for servers in ("127.0.0.1:9092", "10.0.0.5:9092,[::1]:9092"):
        config = {"bootstrap_servers": servers, "topic": "t"}
        assert validate_channel_config(ChannelKind.KAFKA, config, BROKERS_OPEN) == config
    named = DestinationPolicy.build(file_roots=["/tmp/x"], broker_allow=["kafka.internal"])
    config = {"bootstrap_servers": "kafka.internal:9092", "topic": "t"}
    assert validate_channel_config(ChannelKind.KAFKA, config, named) == config
    with pytest.raises(ValidationError):  # broker_allow does not open webhooks
        validate_channel_config(ChannelKind.WEBHOOK, {"url": "http://10.0.0.5/"}, BROKERS_OPEN)


@pytest.fixture
def ports() -> Iterator[tuple[int, int]]:
    """An open port that does not speak AMQP, and a closed one."""
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen(8)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    yield listening.getsockname()[1], closed_port
    listening.close()


def test_rabbitmq_errors_do_not_tell_an_open_port_from_a_closed_one(
        ports: tuple[int, int]) -> None:
    errors = []
    for port in ports:
        channel = RabbitMQChannel(ChannelSpec(name="r", kind=ChannelKind.RABBITMQ, config={
            "url": f"amqp://guest:guest@127.0.0.1:{port}/%2F?socket_timeout=1&stack_timeout=2"
                   "&connection_attempts=1", "routing_key": "q"}), policy=BROKERS_OPEN)
        [result] = channel.send(envelopes(1))
        channel.close()
        assert result.outcome is Outcome.RETRY
        errors.append(result.error)
    assert errors == [CONNECT_FAILED, CONNECT_FAILED]


@pytest.mark.parametrize("host", ["\uff11\uff12\uff17.\uff10.\uff10.\uff11",
                                  "127\u30020\u30020\u30021", "\u2460\u2461\u2466.0.0.1",
                                  "\uff4c\uff4f\uff43\uff41\uff4c\uff48"
                                  "\uff4f\uff53\uff54"])
def test_a_webhook_host_is_judged_as_the_client_reads_it(host: str, receiver: Receiver) -> None:
    """Refused at registration, and — stored under a looser policy — at delivery: the check
    sees 127.0.0.1, the address aiohttp connects to, not the text."""
    url = f"http://{host}:{receiver.port}/in"
    with pytest.raises(ValidationError):
        validate_channel_config(ChannelKind.WEBHOOK, {"url": url}, STRICT)
    channel = WebhookChannel(ChannelSpec(name="h", kind=ChannelKind.WEBHOOK,
                                         config={"url": url}), policy=STRICT)
    [result] = channel.send(envelopes(1))
    channel.close()
    assert result.outcome is Outcome.REJECTED and "loopback" in (result.error or ""), result
    assert receiver.received(None) == []

"""Every send has a deadline: hostile destinations (a slow-loris endpoint, a server that accepts
and never answers) hold one send no longer than the channel's timeout, capped by the operator's
send limits; options a tenant sets cannot lengthen it."""

from __future__ import annotations

import time

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels.kafka import KafkaChannel
from tocsin.channels.limits import SendLimits
from tocsin.channels.rabbitmq import RabbitMQChannel
from tocsin.channels.webhook import WebhookChannel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.tarpit import Tarpit


@pytest.mark.parametrize("mode", ["drip", "silent"])
def test_a_webhook_request_ends_within_its_timeout(mode: str) -> None:
    with Tarpit(mode, every_s=0.2) as pit:
        spec = ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                           config={"url": pit.url, "timeout": 1.0})
        channel = WebhookChannel(spec)
        start = time.monotonic()
        results = channel.send(envelopes(3))
        took = time.monotonic() - start
        channel.close()
    assert {r.outcome for r in results} == {Outcome.RETRY}
    assert {r.error for r in results} == {"timeout"}
    # each read got a byte in time (drip): only a bound on the whole request ends it
    assert took < 3, f"a {mode} endpoint held the send {took:.1f} s"


def test_the_operator_caps_a_webhook_timeout() -> None:
    with Tarpit("drip", every_s=0.2) as pit:
        spec = ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                           config={"url": pit.url, "timeout": 3600})
        channel = WebhookChannel(spec, limits=SendLimits(timeout_s=1.0))
        start = time.monotonic()
        [result] = channel.send(envelopes(1))
        took = time.monotonic() - start
        channel.close()
    assert channel.timeout_s == 1.0
    assert result.outcome is Outcome.RETRY and took < 3


def test_a_rabbitmq_broker_that_never_answers_holds_a_send_within_the_cap() -> None:
    with Tarpit("silent") as pit:
        spec = ChannelSpec(name="r", kind=ChannelKind.RABBITMQ, config={
            "url": f"amqp://guest:guest@{pit.address}/%2F?connection_attempts=10&retry_delay=5"
                   "&socket_timeout=60&stack_timeout=60",
            "routing_key": "q"})
        channel = RabbitMQChannel(spec, limits=SendLimits(timeout_s=1.0, connect_attempts=2,
                                                          retry_delay_s=0.1))
        start = time.monotonic()
        results = channel.send(envelopes(2))
        took = time.monotonic() - start
        channel.close()
    assert {r.outcome for r in results} == {Outcome.RETRY}
    # asked for: 10 attempts x (60 s + 5 s); allowed: 2 attempts sharing 1 s, 0.1 s apart
    assert took < 4, f"the send took {took:.1f} s"


def test_a_kafka_broker_that_never_answers_holds_a_send_within_the_cap() -> None:
    with Tarpit("silent") as pit:
        spec = ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
            "bootstrap_servers": pit.address, "topic": "t", "flush_timeout": 600,
            "producer": {"message.timeout.ms": 600_000, "linger.ms": 60_000}})
        channel = KafkaChannel(spec, limits=SendLimits(timeout_s=1.0, linger_ms=50))
        start = time.monotonic()
        results = channel.send(envelopes(2))
        took = time.monotonic() - start
    assert {r.outcome for r in results} == {Outcome.RETRY}
    assert took < 4, f"the send took {took:.1f} s"


def test_limits_cap_every_option_that_lengthens_a_send() -> None:
    limits = SendLimits(timeout_s=5, linger_ms=100)
    capped = limits.kafka({"message.timeout.ms": 0, "delivery.timeout.ms": "900000",
                           "request.timeout.ms": 1000, "linger.ms": 10_000, "acks": "all"})
    assert capped == {"message.timeout.ms": 5000, "delivery.timeout.ms": 5000,
                      "request.timeout.ms": 1000, "linger.ms": 100, "acks": "all"}
    assert limits.timeout(3600) == 5 and limits.timeout(2) == 2

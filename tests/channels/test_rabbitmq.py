"""The RabbitMQ channel against a real RabbitMQ node."""

from __future__ import annotations

import json
import time

import pika

from tests.channels.envelopes import envelopes
from tests.support.rabbitmq import RabbitMQ
from tocsin.channels import build_channel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.dispatch import wait_until


def test_publishes_persistent_confirmed_messages(rabbitmq: RabbitMQ) -> None:
    spec = ChannelSpec(name="r", kind=ChannelKind.RABBITMQ,
                       config={"url": rabbitmq.url, "routing_key": "reminders"})
    channel = build_channel(spec)
    results = channel.send(envelopes(20, headers={"x-trace": "t"}))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    channel.close()
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    chan = conn.channel()
    got = []
    for _ in range(20):
        method, props, body = chan.basic_get("reminders", auto_ack=True)
        assert method is not None
        got.append((props, json.loads(body)))
    conn.close()
    assert [b["payload"]["n"] for _, b in got] == list(range(20))
    props, body = got[0]
    assert props.delivery_mode == 2 and props.message_id == body["delivery_id"] == "S00000-1"
    assert props.headers["Tocsin-Schedule-Id"] == "S00000" and props.headers["x-trace"] == "t"


def test_unroutable_is_refused_and_a_dead_broker_retried(rabbitmq: RabbitMQ) -> None:
    spec = ChannelSpec(name="r2", kind=ChannelKind.RABBITMQ, config={
        "url": rabbitmq.url, "exchange": "amq.direct", "routing_key": "nobody-bound"})
    [result] = build_channel(spec).send(envelopes(1))
    assert result.outcome is Outcome.REJECTED
    down = ChannelSpec(name="r3", kind=ChannelKind.RABBITMQ, config={
        "url": "amqp://guest:guest@127.0.0.1:1/%2F", "routing_key": "q"})
    [result] = build_channel(down).send(envelopes(1))
    assert result.outcome is Outcome.RETRY


def test_a_connection_closed_by_the_broker_is_reopened(rabbitmq: RabbitMQ) -> None:
    spec = ChannelSpec(name="r4", kind=ChannelKind.RABBITMQ,
                       config={"url": rabbitmq.url, "routing_key": "reopened"})
    channel = build_channel(spec)
    assert {r.outcome for r in channel.send(envelopes(3))} == {Outcome.DELIVERED}
    rabbitmq.close_connections()
    wait_until(lambda: "running" not in rabbitmq.ctl("list_connections", "--silent",
                                                     "--no-table-headers", "state"),
               timeout_s=10, what="the broker closing every connection")
    assert {r.outcome for r in channel.send(envelopes(3))} == {Outcome.DELIVERED}
    channel.close()
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    assert conn.channel().queue_declare("reopened", durable=True).method.message_count == 6
    conn.close()


def test_a_batch_to_a_dead_broker_answers_at_once() -> None:
    from tocsin.testing.api_server import free_port

    down = ChannelSpec(name="r5", kind=ChannelKind.RABBITMQ, config={
        "url": f"amqp://guest:guest@127.0.0.1:{free_port()}/%2F", "routing_key": "q"})
    start = time.monotonic()
    results = build_channel(down).send(envelopes(500))
    assert {r.outcome for r in results} == {Outcome.RETRY} and len(results) == 500
    assert time.monotonic() - start < 5

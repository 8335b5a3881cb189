"""Tocsin's own headers on Kafka and RabbitMQ messages cannot be shadowed by a schedule's
(stored before the edge refused ``Tocsin-*`` names): each message carries one
``Tocsin-Delivery-Id``, the real one."""

from __future__ import annotations

import pika

from tests.channels.envelopes import envelopes
from tests.support.rabbitmq import RabbitMQ
from tocsin.channels import build_channel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.tansu import Tansu, read_topic

FORGED = {"tocsin-delivery-id": "forged", "TOCSIN-SCHEDULE-ID": "forged",
          "Tocsin-Attempt": "99", "tocsin-due-at": "never", "x-trace": "kept"}


def _ours(headers: dict[str, str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name, value in headers.items():
        found.setdefault(name.lower(), []).append(value)
    return found


def test_the_envelope_drops_a_schedules_tocsin_headers() -> None:
    for env in envelopes(3, headers=FORGED):
        sent = _ours(env.transport_headers())
        assert sent["tocsin-delivery-id"] == [env.delivery_id]
        assert sent["tocsin-schedule-id"] == [env.schedule_id]
        assert sent["tocsin-attempt"] == ["1"] and sent["x-trace"] == ["kept"]
        assert "never" not in sent["tocsin-due-at"]


def test_a_kafka_message_carries_the_real_delivery_id(kafka: Tansu) -> None:
    kafka.create_topic("shadow")
    channel = build_channel(ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": kafka.bootstrap, "topic": "shadow"}))
    batch = envelopes(2, headers=FORGED)
    assert {r.outcome for r in channel.send(batch)} == {Outcome.DELIVERED}
    channel.close()
    for msg in read_topic(kafka.bootstrap, "shadow", 1, expect=2):
        pairs = [(k.lower(), v.decode()) for k, v in msg.headers()]
        ids = [v for k, v in pairs if k == "tocsin-delivery-id"]
        assert len(ids) == 1 and ids[0] != "forged" and ("x-trace", "kept") in pairs


def test_a_rabbitmq_message_carries_the_real_delivery_id(rabbitmq: RabbitMQ) -> None:
    channel = build_channel(ChannelSpec(name="r", kind=ChannelKind.RABBITMQ, config={
        "url": rabbitmq.url, "routing_key": "shadow"}))
    assert {r.outcome for r in channel.send(envelopes(2, headers=FORGED))} == {
        Outcome.DELIVERED}
    channel.close()
    conn = pika.BlockingConnection(pika.URLParameters(rabbitmq.url))
    chan = conn.channel()
    for _ in range(2):
        method, props, _body = chan.basic_get("shadow", auto_ack=True)
        assert method is not None
        sent = _ours({str(k): str(v) for k, v in props.headers.items()})
        assert sent["tocsin-delivery-id"] == [props.message_id] and sent["x-trace"] == ["kept"]
    conn.close()

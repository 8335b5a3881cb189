"""The Kafka channel against a real Kafka-protocol broker (tansu)."""

from __future__ import annotations

import json
import time

from tests.channels.envelopes import envelopes
from tocsin.channels import build_channel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.tansu import Tansu, read_topic


def murmur2(data: bytes) -> int:
    """Kafka's Java partitioner hash (murmur2, seed 0x9747b28c)."""
    m, r, length = 0x5BD1E995, 24, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = int.from_bytes(data[i:i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> r
        k = (k * m) & 0xFFFFFFFF
        h = ((h * m) & 0xFFFFFFFF) ^ k
    tail = length % 4
    if tail:
        rest = data[length - tail:]
        if tail == 3:
            h ^= rest[2] << 16
        if tail >= 2:
            h ^= rest[1] << 8
        h ^= rest[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h


def java_partition(key: bytes, partitions: int) -> int:
    """Where Java's default partitioner puts ``key``."""
    return (murmur2(key) & 0x7FFFFFFF) % partitions


def test_messages_keys_headers_and_java_compatible_partitions(kafka: Tansu) -> None:
    kafka.create_topic("reminders", partitions=4)
    spec = ChannelSpec(name="k", kind=ChannelKind.KAFKA,
                       config={"bootstrap_servers": kafka.bootstrap, "topic": "reminders"})
    channel = build_channel(spec)
    batch = envelopes(40)
    batch[:10] = [e._replace(ordering_key="order-1") for e in batch[:10]]
    results = channel.send(batch)
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    channel.close()
    messages = read_topic(kafka.bootstrap, "reminders", 4, expect=40)
    assert len(messages) == 40
    by_id = {json.loads(m.value())["schedule_id"]: m for m in messages}
    assert set(by_id) == {e.schedule_id for e in batch}
    for env in batch:
        msg = by_id[env.schedule_id]
        key = (env.ordering_key or env.schedule_id).encode()
        assert msg.key() == key
        assert msg.partition() == java_partition(key, 4)
        headers = {k: v.decode() for k, v in msg.headers()}
        assert headers["Tocsin-Delivery-Id"] == env.delivery_id
    ordered = [json.loads(m.value())["payload"]["n"] for m in messages
               if m.key() == b"order-1"]
    assert ordered == list(range(10))


def test_key_value_and_every_header(kafka: Tansu, kafka_broker: str) -> None:
    kafka.create_topic("keyed", partitions=3)
    channel = build_channel(ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": kafka_broker, "topic": "keyed"}))
    batch = envelopes(3, key="client-key", headers={"x-trace": "t1"})
    batch[2] = batch[2]._replace(ordering_key="ok-2")
    assert {r.outcome for r in channel.send(batch)} == {Outcome.DELIVERED}
    channel.close()
    by_id = {json.loads(m.value())["schedule_id"]: m
             for m in read_topic(kafka_broker, "keyed", 3, expect=3)}
    for env in batch:
        msg = by_id[env.schedule_id]
        assert msg.key() == (env.ordering_key or "client-key").encode()
        assert msg.partition() == java_partition(msg.key(), 3)
        assert msg.value() == env.to_json_bytes()
        assert {k: v.decode() for k, v in msg.headers()} == env.transport_headers()


def test_a_message_too_large_is_rejected_alone(kafka: Tansu) -> None:
    kafka.create_topic("sized")
    channel = build_channel(ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": kafka.bootstrap, "topic": "sized",
        "producer": {"message.max.bytes": 2000}}))
    big, small = envelopes(2)
    big = big._replace(payload=b'"' + b"x" * 5000 + b'"')
    results = {r.delivery_id: r for r in channel.send([big, small])}
    channel.close()
    assert results[big.delivery_id].outcome is Outcome.REJECTED
    assert "size" in (results[big.delivery_id].error or "").lower()
    assert results[small.delivery_id].outcome is Outcome.DELIVERED


def test_unreachable_broker_is_retried() -> None:
    from tocsin.testing.api_server import free_port

    spec = ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": f"127.0.0.1:{free_port()}", "topic": "t", "flush_timeout": 2.0})
    start = time.monotonic()
    results = build_channel(spec).send(envelopes(2))
    assert {r.outcome for r in results} == {Outcome.RETRY}
    assert time.monotonic() - start < 10


def _native_threads() -> int:
    """librdkafka's threads in this process, by the names it gives them ("rdk:main",
    "rdk:broker1", ...). Counting every thread would count other tests' threads too, which
    come and go while this one runs."""
    import os

    count = 0
    for task in os.listdir("/proc/self/task"):
        try:
            with open(f"/proc/self/task/{task}/comm") as comm:
                count += comm.read().startswith("rdk:")
        except FileNotFoundError:  # the thread ended while we looked
            continue
    return count


def test_a_closed_channel_leaves_no_producer_threads_and_reopens_when_used(kafka: Tansu) -> None:
    kafka.create_topic("closing", partitions=1)
    spec = ChannelSpec(name="k", kind=ChannelKind.KAFKA,
                       config={"bootstrap_servers": kafka.bootstrap, "topic": "closing"})
    before = _native_threads()
    channels = [build_channel(spec) for _ in range(5)]
    for channel in channels:
        assert channel.send(envelopes(1))[0].outcome is Outcome.DELIVERED
    assert _native_threads() > before  # each producer runs librdkafka threads
    for channel in channels:
        channel.close()
    deadline = time.monotonic() + 10
    while _native_threads() > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _native_threads() <= before
    assert channels[0].send(envelopes(1))[0].outcome is Outcome.DELIVERED
    channels[0].close()

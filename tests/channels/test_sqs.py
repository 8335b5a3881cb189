"""The SQS channel against a real SQS-protocol server (moto's server mode)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import pytest

from tests.channels.envelopes import envelopes
from tests.support.servers import MotoSQS
from tocsin.channels import build_channel, validate_channel_config
from tocsin.channels.limits import SendLimits
from tocsin.channels.policy import DestinationPolicy
from tocsin.channels.sqs import SQSChannel
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, PayloadKind
from tocsin.errors import ValidationError
from tocsin.redact import redact
from tocsin.testing.tarpit import Tarpit

CREDS = {"access_key_id": "testing", "secret_access_key": "testing"}


def spec(url: str, name: str = "q", **more: Any) -> ChannelSpec:
    """An SQS channel of the queue at ``url``."""
    return ChannelSpec(name=name, kind=ChannelKind.SQS,
                       config={"queue_url": url, **CREDS, **more})


def drain(server: MotoSQS, url: str, expect: int, timeout_s: float = 10) -> list[dict[str, Any]]:
    """Every message of the queue (received and deleted), in the order SQS hands them out."""
    client: Any = server.client()
    got: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    while len(got) < expect and time.monotonic() < deadline:
        answer = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                        MessageAttributeNames=["All"],
                                        AttributeNames=["All"], WaitTimeSeconds=0)
        for msg in answer.get("Messages", ()):
            got.append(msg)
            client.delete_message(QueueUrl=url, ReceiptHandle=msg["ReceiptHandle"])
    return got


def test_a_batch_arrives_with_its_delivery_ids(sqs_server: MotoSQS) -> None:
    url = sqs_server.create_queue("reminders")
    channel = build_channel(spec(url))
    results = channel.send(envelopes(25, headers={"x-trace": "t"}))
    channel.close()
    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 25
    got = drain(sqs_server, url, 25)
    bodies = sorted((json.loads(m["Body"]) for m in got), key=lambda b: b["payload"]["n"])
    assert [b["payload"]["n"] for b in bodies] == list(range(25))
    first = next(m for m in got if json.loads(m["Body"])["delivery_id"] == "S00000-1")
    attrs = {k: v["StringValue"] for k, v in first["MessageAttributes"].items()}
    assert attrs["Tocsin-Delivery-Id"] == "S00000-1" and attrs["x-trace"] == "t"


def test_fifo_keeps_a_keys_order_and_drops_a_repeated_delivery(sqs_server: MotoSQS) -> None:
    url = sqs_server.create_queue("orders.fifo")
    channel = build_channel(spec(url, name="fifo"))
    batch = envelopes(12, ordering_key="customer-7")
    assert {r.outcome for r in channel.send(batch)} == {Outcome.DELIVERED}
    # a repeat of the same deliveries (a replay after a crash): SQS drops them by delivery id
    assert {r.outcome for r in channel.send(batch[:3])} == {Outcome.DELIVERED}
    channel.close()
    got = drain(sqs_server, url, 15, timeout_s=3)
    assert [json.loads(m["Body"])["payload"]["n"] for m in got] == list(range(12))
    assert {m["Attributes"]["MessageGroupId"] for m in got} == {"customer-7"}
    assert got[0]["Attributes"]["MessageDeduplicationId"] == "S00000-1"


def test_fifo_groups_keep_their_order_when_sent_at_once(sqs_server: MotoSQS) -> None:
    url = sqs_server.create_queue("groups.fifo")
    channel = build_channel(spec(url, name="groups", concurrency=4, timeout=60))
    batch = [Envelope(schedule_id=f"S{i:03d}", delivery_id=f"S{i:03d}-1", attempt=1, epoch=1,
                      tenant="default", channel="groups", payload=b'{"n":%d}' % i,
                      payload_kind=PayloadKind.JSON, due_ms=1_800_000_000_000 + i,
                      ordering_key=f"k{i % 7}") for i in range(140)]
    assert {r.outcome for r in channel.send(batch)} == {Outcome.DELIVERED}
    channel.close()
    got = drain(sqs_server, url, 140, timeout_s=20)
    by_key: dict[str, list[int]] = {}
    for m in got:
        by_key.setdefault(m["Attributes"]["MessageGroupId"], []).append(
            json.loads(m["Body"])["payload"]["n"])
    assert by_key == {f"k{k}": list(range(k, 140, 7)) for k in range(7)}


class SlowDoor:
    """A TCP proxy on loopback to ``port`` that holds each new connection ``delay_s`` before
    passing it on: a service far away, each request answered ``delay_s`` late."""

    def __init__(self, port: int, delay_s: float) -> None:
        self.upstream, self.delay_s = port, delay_s
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._server.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        time.sleep(self.delay_s)
        with client, socket.create_connection(("127.0.0.1", self.upstream)) as server:
            threading.Thread(target=_pump, args=(server, client), daemon=True).start()
            _pump(client, server)
            time.sleep(self.delay_s + 5)  # the answer's way back, then both close

    def close(self) -> None:
        self._server.close()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    """Copy ``src`` to ``dst`` until ``src`` ends."""
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        return


def test_a_far_service_gets_a_whole_chunk_within_the_timeout(sqs_server: MotoSQS) -> None:
    """200 messages (20 requests) to a service that answers each 1 s late: one after the
    other they would take 20 s, and those not started by half the 16 s timeout would be
    retried; sent 10 at a time, all are delivered (each request may take 4 s)."""
    url = sqs_server.create_queue("far")
    door = SlowDoor(sqs_server.port, delay_s=1.0)
    try:
        channel = build_channel(spec(f"http://127.0.0.1:{door.port}/123456789012/far",
                                     timeout=16))
        results = channel.send(envelopes(200))
        channel.close()
    finally:
        door.close()
    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 200, \
        {r.error for r in results if r.outcome is not Outcome.DELIVERED}
    assert len(drain(sqs_server, url, 200)) == 200
    closed = channel.send(envelopes(3))  # after close: nothing sent, nothing lost
    assert [r.outcome for r in closed] == [Outcome.RETRY] * 3


def test_a_message_sqs_refuses_is_rejected_alone(sqs_server: MotoSQS) -> None:
    url = sqs_server.create_queue("sizes")
    big = Envelope(schedule_id="BIG", delivery_id="BIG-1", attempt=1, epoch=1, tenant="default",
                   channel="q", payload=b"x" * (1100 * 1024), payload_kind=PayloadKind.TEXT,
                   due_ms=1_800_000_000_000)
    results = build_channel(spec(url, name="sizes")).send([*envelopes(2), big])
    assert [r.outcome for r in results] == [Outcome.DELIVERED, Outcome.DELIVERED,
                                            Outcome.REJECTED]


def test_a_missing_queue_and_a_dead_service_are_retried(sqs_server: MotoSQS) -> None:
    results = build_channel(spec(f"{sqs_server.endpoint}/123456789012/nobody")).send(
        envelopes(2))
    assert {r.outcome for r in results} == {Outcome.RETRY}
    from tocsin.testing.api_server import free_port

    down = spec(f"http://127.0.0.1:{free_port()}/123456789012/q")
    start = time.monotonic()
    results = build_channel(down).send(envelopes(30))
    assert {r.outcome for r in results} == {Outcome.RETRY} and len(results) == 30
    assert time.monotonic() - start < 5


def test_a_service_that_never_answers_holds_a_send_within_the_cap() -> None:
    with Tarpit("silent") as pit:
        channel = SQSChannel(spec(f"http://{pit.address}/123456789012/q", timeout=600),
                             limits=SendLimits(timeout_s=1.0))
        start = time.monotonic()
        results = channel.send(envelopes(40))
        took = time.monotonic() - start
        channel.close()
    assert {r.outcome for r in results} == {Outcome.RETRY} and len(results) == 40
    assert took < 2.5, f"the send took {took:.1f} s"


def test_config_is_checked_and_secrets_are_write_only() -> None:
    policy = DestinationPolicy.build(file_roots=["/tmp"], broker_allow=["127.0.0.0/8"])
    good = {"queue_url": "https://sqs.eu-west-1.amazonaws.com/1/q.fifo",
            "access_key_id": "AKIA", "secret_access_key": "s3cr3t", "session_token": "tok"}
    assert redact(good)["secret_access_key"] == "***"
    assert redact(good)["session_token"] == "***"
    for bad, field in [({"queue_url": "ftp://x/1/q"}, "config.queue_url"),
                       ({"queue_url": "https://u:p@sqs.x/1/q"}, "config.queue_url"),
                       ({"queue_url": "https://sqs.x/"}, "config.queue_url"),
                       ({**good, "secret_access_key": None}, "config.secret_access_key"),
                       ({**good, "timeout": 0}, "config.timeout"),
                       ({**good, "concurrency": 0}, "config.concurrency"),
                       ({**good, "concurrency": 65}, "config.concurrency"),
                       ({**good, "endpoint_url": "http://169.254.169.254/"},
                        "config.endpoint_url"),
                       ({**good, "queue_url": "http://10.0.0.8/1/q"}, "config.queue_url"),
                       ({**good, "bogus": 1}, "config.bogus")]:
        with pytest.raises(ValidationError) as err:
            validate_channel_config(ChannelKind.SQS, bad, policy)
        assert err.value.field == field, bad
    with pytest.raises(ValidationError, match="redaction mark"):
        validate_channel_config(ChannelKind.SQS, redact(good), policy)
    from tocsin.channels.sqs import SQSConfig

    config = SQSConfig(queue_url=good["queue_url"])
    assert config.fifo and config.region_name == "eu-west-1"
    assert config.endpoint == "https://sqs.eu-west-1.amazonaws.com"

"""One harness per channel kind, for the contract every channel passes (test_contract.py): how
to make a channel to a fresh destination on the run's real server, read back what arrived
there, point one at a server that never answers, and take the server down and up again."""

from __future__ import annotations

import asyncio
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from tocsin.abc import Channel
from tocsin.channels import build_channel
from tocsin.channels.limits import SendLimits
from tocsin.channels.policy import DestinationPolicy
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.testing.api_server import free_port

__all__ = ["HARNESSES", "Harness", "harness_for"]

_names = itertools.count()


class Harness:
    """A kind's harness over the run's server (``server``: the fixture's value)."""

    kind: ChannelKind
    fixture: str | None = None
    """The session fixture of the kind's server."""
    outage = "kill"
    """How :meth:`down` takes the destination away: ``kill`` (the server process is killed
    and started again on the same port and data), ``answers`` (the server answers every
    delivery with an error), or ``""`` (no server: the contract's outage part does not apply)."""
    secret_field = ""
    """The config field holding a secret in :meth:`secret_spec`."""

    def __init__(self, server: Any, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp

    def fresh(self) -> str:
        """A destination name no other test used."""
        return f"contract{next(_names)}"

    def spec(self) -> ChannelSpec:
        """A channel to a fresh destination on the server (prepared: a queue made...)."""
        raise NotImplementedError

    def build(self, spec: ChannelSpec, *, limits: SendLimits | None = None) -> Channel:
        """The live channel (with ``limits`` when given)."""
        if limits is None:
            return build_channel(spec)
        from tocsin.channels import _classes  # the class itself, to hand it the limits

        cls: Any = _classes(spec.kind)[0]
        channel: Channel = cls(spec, limits=limits)
        return channel

    def received(self, spec: ChannelSpec) -> list[str]:
        """The delivery ids that arrived at ``spec``'s destination, in order."""
        raise NotImplementedError

    def silent_spec(self, address: str) -> ChannelSpec | None:
        """A channel to a server at ``address`` that never answers (None: no network)."""
        raise NotImplementedError

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        """A channel holding a secret, to a destination where nothing listens; the secret."""
        raise NotImplementedError

    def down(self) -> None:
        """Take the destination away (see :attr:`outage`)."""
        self.server.kill()

    def up(self, spec: ChannelSpec) -> None:
        """Bring it back (``spec``'s destination made again where the server forgot it)."""
        self.server.start()


class FileHarness(Harness):
    kind = ChannelKind.FILE
    outage = ""

    def build(self, spec: ChannelSpec, *, limits: SendLimits | None = None) -> Channel:
        from tocsin.channels.file import FileChannel

        return FileChannel(spec, policy=DestinationPolicy.build(file_roots=[self.tmp]))

    def spec(self) -> ChannelSpec:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"path": str(self.tmp / f"{self.fresh()}.jsonl")})

    def received(self, spec: ChannelSpec) -> list[str]:
        path = Path(spec.config["path"])
        lines = path.read_text().splitlines() if path.exists() else []
        return [json.loads(line)["delivery_id"] for line in lines]

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return None

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        pytest.skip("a file channel holds no secret")


class WebhookHarness(Harness):
    kind = ChannelKind.WEBHOOK
    fixture = "receiver"
    outage = "answers"
    secret_field = "secret"

    def spec(self) -> ChannelSpec:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"url": f"{self.server.url}/{self.fresh()}", "timeout": 5})

    def received(self, spec: ChannelSpec) -> list[str]:
        path = "/" + spec.config["url"].rsplit("/", 1)[1]
        return [r.json()["delivery_id"] for r in self.server.received()
                if r.path.split("?", 1)[0] == path]

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"url": f"http://{address}/", "timeout": 600})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        from tests.channels.envelopes import SECRET

        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "url": f"http://127.0.0.1:{free_port()}/", "secret": SECRET}), SECRET

    def down(self) -> None:
        self.server.set_behaviour(status=503)

    def up(self, spec: ChannelSpec) -> None:
        self.server.set_behaviour(status=200)


class KafkaHarness(Harness):
    kind = ChannelKind.KAFKA
    fixture = "kafka"
    secret_field = "producer"

    def spec(self) -> ChannelSpec:
        topic = self.fresh()
        self.server.create_topic(topic)
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "bootstrap_servers": self.server.bootstrap, "topic": topic, "flush_timeout": 10})

    def received(self, spec: ChannelSpec) -> list[str]:
        from tocsin.testing.tansu import read_topic

        return [json.loads(m.value())["delivery_id"] for m in
                read_topic(self.server.bootstrap, spec.config["topic"], 1, timeout_s=10)]

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "bootstrap_servers": address, "topic": "t", "flush_timeout": 600})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        secret = "kafka-pass-8d1e"
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "bootstrap_servers": f"127.0.0.1:{free_port()}", "topic": "t", "flush_timeout": 2,
            "producer": {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
                         "sasl.username": "u", "sasl.password": secret}}), secret

    def down(self) -> None:
        self.server.stop()

    def up(self, spec: ChannelSpec) -> None:
        self.server.start()  # the same port; its memory storage starts empty
        self.server.create_topic(spec.config["topic"])


class RabbitMQHarness(Harness):
    kind = ChannelKind.RABBITMQ
    fixture = "rabbitmq"
    secret_field = "url"

    def spec(self) -> ChannelSpec:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"url": self.server.url, "routing_key": self.fresh()})

    def received(self, spec: ChannelSpec) -> list[str]:
        import pika

        conn = pika.BlockingConnection(pika.URLParameters(self.server.url))
        chan = conn.channel()
        got = []
        while True:
            method, props, _ = chan.basic_get(spec.config["routing_key"], auto_ack=False)
            if method is None:
                break
            got.append(props.message_id)
        conn.close()  # unacknowledged: back in the queue for the next read
        return got

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "url": f"amqp://guest:guest@{address}/%2F?socket_timeout=60&stack_timeout=60",
            "routing_key": "q"})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        secret = "amqp-pass-51c0"
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "url": f"amqp://u:{secret}@127.0.0.1:{free_port()}/%2F", "routing_key": "q"}), secret

    def down(self) -> None:
        self.server.stop()

    def up(self, spec: ChannelSpec) -> None:
        self.server.start()


class SQSHarness(Harness):
    kind = ChannelKind.SQS
    fixture = "sqs_server"
    secret_field = "secret_access_key"

    def spec(self) -> ChannelSpec:
        url = self.server.create_queue(self.fresh())
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "queue_url": url, "access_key_id": "testing", "secret_access_key": "testing"})

    def received(self, spec: ChannelSpec) -> list[str]:
        """Read and deleted (a FIFO queue hands out a group's next message only once the one
        before is deleted), so kept here for the next read."""
        client: Any = self.server.client()
        url = spec.config["queue_url"]
        got = self.__dict__.setdefault("_got", {}).setdefault(url, [])
        while True:
            answer = client.receive_message(QueueUrl=url, MaxNumberOfMessages=10,
                                            VisibilityTimeout=30)
            if not answer.get("Messages"):
                return list(got)
            for m in answer["Messages"]:
                got.append(json.loads(m["Body"])["delivery_id"])
                client.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "queue_url": f"http://{address}/123456789012/q", "access_key_id": "a",
            "secret_access_key": "b", "timeout": 600})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        secret = "aws-secret-0f9b"
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "queue_url": f"http://127.0.0.1:{free_port()}/123456789012/q",
            "access_key_id": "AKIATEST", "secret_access_key": secret}), secret

    def up(self, spec: ChannelSpec) -> None:
        self.server.start()  # moto keeps its queues in memory: make it again
        self.server.create_queue(spec.config["queue_url"].rsplit("/", 1)[1])


class SQSFifoHarness(SQSHarness):
    """A FIFO queue: a key's order kept, repeats of a delivery id dropped."""

    def spec(self) -> ChannelSpec:
        url = self.server.create_queue(f"{self.fresh()}.fifo")
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "queue_url": url, "access_key_id": "testing", "secret_access_key": "testing"})

    def up(self, spec: ChannelSpec) -> None:
        self.server.start()
        self.server.create_queue(spec.config["queue_url"].rsplit("/", 1)[1])


class RedisStreamsHarness(Harness):
    kind = ChannelKind.REDIS_STREAMS
    fixture = "redis_server"
    secret_field = "url"

    def spec(self) -> ChannelSpec:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"url": self.server.url, "stream": self.fresh()})

    def received(self, spec: ChannelSpec) -> list[str]:
        import redis

        client = redis.Redis.from_url(self.server.url)
        try:
            return [f[b"Tocsin-Delivery-Id"].decode()
                    for _, f in client.xrange(spec.config["stream"])]
        finally:
            client.close()

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "url": f"redis://{address}/0", "stream": "s", "timeout": 600})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        secret = "redis-pass-77aa"
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "url": f"redis://app:{secret}@127.0.0.1:{free_port()}/0", "stream": "s"}), secret


class NatsHarness(Harness):
    kind = ChannelKind.NATS
    fixture = "nats_server"
    secret_field = "password"

    def spec(self) -> ChannelSpec:
        subject = self.fresh()
        self._stream(subject)
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"servers": self.server.url, "subject": subject})

    def _stream(self, subject: str) -> None:
        import nats

        async def run() -> None:
            nc = await nats.connect(self.server.url)
            await nc.jetstream().add_stream(name=subject.upper(), subjects=[subject])
            await nc.close()
        asyncio.run(run())

    def received(self, spec: ChannelSpec) -> list[str]:
        import nats

        async def run() -> list[str]:
            nc = await nats.connect(self.server.url)
            js = nc.jetstream()
            stream = spec.config["subject"].upper()
            info = await js.stream_info(stream)
            got = [(await js.get_msg(stream, seq)).headers["Nats-Msg-Id"]  # type: ignore[index]
                   for seq in range(info.state.first_seq, info.state.last_seq + 1)
                   ] if info.state.messages else []
            await nc.close()
            return got
        return asyncio.run(run())

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "servers": f"nats://{address}", "subject": "s", "timeout": 600})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        secret = "nats-pass-3c3c"
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "servers": f"nats://127.0.0.1:{free_port()}", "subject": "s", "user": "u",
            "password": secret}), secret


class PluginHarness(Harness):
    """The test kit's example plug-in (``tests/plugins/tocsin_example_channel``)."""

    kind = ChannelKind("example_lines")
    fixture = "lines_server"
    secret_field = "token"

    def spec(self) -> ChannelSpec:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"address": self.server.address})

    def received(self, spec: ChannelSpec) -> list[str]:
        ids: list[str] = self.server.delivery_ids(spec.name)
        return ids

    def silent_spec(self, address: str) -> ChannelSpec | None:
        return ChannelSpec(name=self.fresh(), kind=self.kind,
                           config={"address": address, "timeout": 60})

    def secret_spec(self) -> tuple[ChannelSpec, str]:
        secret = "lines-token-9e9e"
        return ChannelSpec(name=self.fresh(), kind=self.kind, config={
            "address": f"127.0.0.1:{free_port()}", "token": secret}), secret


HARNESSES: dict[str, type[Harness]] = {h.kind.value: h for h in (
    FileHarness, WebhookHarness, KafkaHarness, RabbitMQHarness, SQSHarness, RedisStreamsHarness,
    NatsHarness, PluginHarness)}
"""Every channel kind's harness, by kind."""


EXTRA: dict[str, type[Harness]] = {"sqs_fifo": SQSFifoHarness}
"""Variants of a kind that some tests run besides."""


def harness_for(kind: str, request: pytest.FixtureRequest, tmp: Path) -> Harness:
    """``kind``'s harness over the run's server (``kind``: a key of HARNESSES or EXTRA)."""
    cls = HARNESSES.get(kind) or EXTRA[kind]
    server = request.getfixturevalue(cls.fixture) if cls.fixture else None
    return cls(server, tmp)

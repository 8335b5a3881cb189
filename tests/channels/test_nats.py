"""The NATS channel against a real nats-server with JetStream."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any

import nats
import pytest

from tests.channels.envelopes import envelopes
from tests.support.servers import NatsServer
from tocsin.channels import build_channel, validate_channel_config
from tocsin.channels.limits import SendLimits
from tocsin.channels.nats import NatsChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.redact import redact
from tocsin.testing.tarpit import Tarpit


def spec(url: str, subject: str, name: str = "n", **more: Any) -> ChannelSpec:
    """A NATS channel publishing to ``subject``."""
    return ChannelSpec(name=name, kind=ChannelKind.NATS,
                       config={"servers": url, "subject": subject, **more})


def make_stream(server: NatsServer, stream: str, subject: str) -> None:
    """A JetStream stream named ``stream`` capturing ``subject`` (made anew)."""
    async def run() -> None:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        with contextlib.suppress(nats.js.errors.NotFoundError):
            await js.delete_stream(stream)
        await js.add_stream(name=stream, subjects=[subject])
        await nc.close()
    asyncio.run(run())


def read_stream(server: NatsServer, stream: str) -> list[Any]:
    """The stream's messages, oldest first."""
    async def run() -> list[Any]:
        nc = await nats.connect(server.url)
        js = nc.jetstream()
        info = await js.stream_info(stream)
        got = [await js.get_msg(stream, seq) for seq in
               range(info.state.first_seq, info.state.last_seq + 1)] if info.state.messages else []
        await nc.close()
        return got
    return asyncio.run(run())


def test_a_batch_is_stored_with_its_delivery_ids_once(nats_server: NatsServer) -> None:
    make_stream(nats_server, "REMINDERS", "reminders")
    channel = build_channel(spec(nats_server.url, "reminders"))
    assert channel.is_async
    results = channel.send(envelopes(40, headers={"x-trace": "t"}))
    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 40
    # a repeat of deliveries (a replay after a crash) is acknowledged and not stored again
    assert {r.outcome for r in channel.send(envelopes(5))} == {Outcome.DELIVERED}
    channel.close()
    got = read_stream(nats_server, "REMINDERS")
    assert sorted(json.loads(m.data)["payload"]["n"] for m in got) == list(range(40))
    first = next(m for m in got if m.headers["Nats-Msg-Id"] == "S00000-1")
    assert first.headers["Tocsin-Delivery-Id"] == "S00000-1" and first.headers["x-trace"] == "t"


def test_no_stream_and_a_dead_server_are_retried(nats_server: NatsServer) -> None:
    results = build_channel(spec(nats_server.url, "nobody.listens")).send(envelopes(3))
    assert {r.outcome for r in results} == {Outcome.RETRY}
    from tocsin.testing.api_server import free_port

    start = time.monotonic()
    results = build_channel(spec(f"nats://127.0.0.1:{free_port()}", "s")).send(envelopes(50))
    assert {r.outcome for r in results} == {Outcome.RETRY} and len(results) == 50
    assert time.monotonic() - start < 5


def test_a_server_that_never_answers_holds_a_send_within_the_cap() -> None:
    with Tarpit("silent") as pit:
        channel = NatsChannel(spec(f"nats://{pit.address}", "s", timeout=600),
                              limits=SendLimits(timeout_s=1.0))
        start = time.monotonic()
        results = channel.send(envelopes(20))
        took = time.monotonic() - start
        channel.close()
    assert {r.outcome for r in results} == {Outcome.RETRY}
    assert took < 2.5, f"the send took {took:.1f} s"


def test_config_is_checked_and_secrets_are_write_only() -> None:
    policy = DestinationPolicy.build(file_roots=["/tmp"], broker_allow=["127.0.0.0/8"])
    good = {"servers": ["nats://127.0.0.1:4222"], "subject": "a.b", "user": "u",
            "password": "hunter2"}
    assert redact(good)["password"] == "***"
    assert redact({"servers": "nats://u:pw@h:4222", "token": "t"}) == {
        "servers": "nats://u:***@h:4222", "token": "***"}
    for bad, field in [({**good, "servers": "http://127.0.0.1"}, "config.servers"),
                       ({**good, "servers": "nats://10.0.0.1:4222"}, "config.servers"),
                       ({**good, "servers": "nats://u:p\\@10.1.2.3:4222"}, "config.servers"),
                       ({**good, "servers": []}, "config.servers"),
                       ({**good, "subject": "a.*"}, "config.subject"),
                       ({**good, "password": None}, "config.password"),
                       ({**good, "token": "t"}, "config.token")]:
        with pytest.raises(ValidationError) as err:
            validate_channel_config(ChannelKind.NATS, bad, policy)
        assert err.value.field == field, bad
    with pytest.raises(ValidationError, match="redaction mark"):
        validate_channel_config(ChannelKind.NATS, redact(good), policy)

"""The Redis Streams channel against a real redis-server."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

from tests.channels.envelopes import envelopes
from tests.support.servers import RedisServer
from tocsin.channels import build_channel, validate_channel_config
from tocsin.channels.limits import SendLimits
from tocsin.channels.policy import DestinationPolicy
from tocsin.channels.redis_streams import RedisStreamsChannel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.redact import redact
from tocsin.testing.tarpit import Tarpit


def spec(url: str, stream: str, name: str = "rs", **more: Any) -> ChannelSpec:
    """A Redis Streams channel of ``stream``."""
    return ChannelSpec(name=name, kind=ChannelKind.REDIS_STREAMS,
                       config={"url": url, "stream": stream, **more})


def entries(server: RedisServer, stream: str) -> list[dict[bytes, bytes]]:
    """The stream's entries' fields, oldest first."""
    client = redis.Redis.from_url(server.url)
    try:
        return [fields for _, fields in client.xrange(stream)]
    finally:
        client.close()


def test_a_batch_is_added_in_order_with_its_delivery_ids(redis_server: RedisServer) -> None:
    channel = build_channel(spec(redis_server.url, "reminders"))
    results = channel.send(envelopes(30, headers={"x-trace": "t"}))
    channel.close()
    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 30
    got = entries(redis_server, "reminders")
    assert [json.loads(f[b"envelope"])["payload"]["n"] for f in got] == list(range(30))
    assert got[0][b"Tocsin-Delivery-Id"] == b"S00000-1" and got[0][b"x-trace"] == b"t"


def test_maxlen_trims_and_dedup_drops_a_repeated_delivery(redis_server: RedisServer) -> None:
    trimmed = build_channel(spec(redis_server.url, "trimmed", name="t", maxlen=10))
    for _ in range(20):
        assert {r.outcome for r in trimmed.send(envelopes(50))} == {Outcome.DELIVERED}
    # MAXLEN ~ trims whole nodes: about 10, never the 1000 added
    assert len(entries(redis_server, "trimmed")) < 200
    once = build_channel(spec(redis_server.url, "once", name="o", dedup_seconds=60))
    assert {r.outcome for r in once.send(envelopes(5))} == {Outcome.DELIVERED}
    assert {r.outcome for r in once.send(envelopes(8))} == {Outcome.DELIVERED}
    got = entries(redis_server, "once")
    assert [json.loads(f[b"envelope"])["delivery_id"] for f in got] == \
        [f"S{i:05d}-1" for i in range(8)]


def test_an_error_reply_and_a_dead_server_are_retried(redis_server: RedisServer) -> None:
    client = redis.Redis.from_url(redis_server.url)
    client.set("not-a-stream", "x")
    client.close()
    results = build_channel(spec(redis_server.url, "not-a-stream", name="w")).send(envelopes(2))
    assert {r.outcome for r in results} == {Outcome.RETRY}
    assert all("WRONGTYPE" in (r.error or "") for r in results)
    from tocsin.testing.api_server import free_port

    start = time.monotonic()
    results = build_channel(spec(f"redis://127.0.0.1:{free_port()}/0", "s")).send(envelopes(50))
    assert {r.outcome for r in results} == {Outcome.RETRY} and len(results) == 50
    assert time.monotonic() - start < 5


def test_a_server_that_never_answers_holds_a_send_within_the_cap() -> None:
    with Tarpit("silent") as pit:
        channel = RedisStreamsChannel(spec(f"redis://{pit.address}/0", "s", timeout=600),
                                      limits=SendLimits(timeout_s=1.0))
        start = time.monotonic()
        results = channel.send(envelopes(20))
        took = time.monotonic() - start
        channel.close()
    assert {r.outcome for r in results} == {Outcome.RETRY}
    assert took < 2.5, f"the send took {took:.1f} s"


def test_config_is_checked_and_the_password_is_write_only() -> None:
    policy = DestinationPolicy.build(file_roots=["/tmp"], broker_allow=["127.0.0.0/8"])
    good = {"url": "redis://app:hunter2@127.0.0.1:6379/0", "stream": "s"}
    assert redact(good)["url"] == "redis://app:***@127.0.0.1:6379/0"
    for bad, field in [({**good, "url": "unix:///run/redis.sock"}, "config.url"),
                       ({**good, "url": "redis://127.0.0.1/0?ssl_keyfile=/etc/shadow"},
                        "config.url"),
                       ({**good, "url": "redis://10.1.2.3/0"}, "config.url"),
                       # judged as redis-py reads it (10.1.2.3), not as yarl does (no host)
                       ({**good, "url": "redis://u:p\\@10.1.2.3/0"}, "config.url"),
                       ({**good, "stream": ""}, "config.stream"),
                       ({**good, "maxlen": 0}, "config.maxlen"),
                       ({**good, "dedup_seconds": -1}, "config.dedup_seconds")]:
        with pytest.raises(ValidationError) as err:
            validate_channel_config(ChannelKind.REDIS_STREAMS, bad, policy)
        assert err.value.field == field, bad
    with pytest.raises(ValidationError, match="redaction mark"):
        validate_channel_config(ChannelKind.REDIS_STREAMS, redact(good), policy)

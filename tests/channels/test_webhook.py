"""The webhook channel against a real HTTP receiver."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from tests.channels.envelopes import envelopes
from tests.support.api_server import free_port
from tests.support.receiver import Receiver
from tocsin.channels import build_channel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome


def _channel(url: str, **config: object) -> ChannelSpec:
    return ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK, config={"url": url, **config})


def test_posts_the_envelope_with_tocsin_headers_and_signature(receiver: Receiver) -> None:
    channel = build_channel(_channel(receiver.url + "/in", secret="s3cret"))
    results = channel.send(envelopes(5, headers={"x-tenant-trace": "abc"}))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    got = sorted(receiver.received(), key=lambda r: r.headers["tocsin-schedule-id"])
    assert len(got) == 5
    first = got[0]
    assert first.path == "/in"
    assert first.headers["tocsin-delivery-id"] == "S00000-1"
    assert first.headers["tocsin-attempt"] == "1"
    assert first.headers["tocsin-due-at"] == "2027-01-15T08:00:00.000Z"
    assert first.headers["x-tenant-trace"] == "abc"
    assert first.json()["payload"] == {"n": 0}
    expected = "sha256=" + hmac.new(b"s3cret", first.body, hashlib.sha256).hexdigest()
    assert first.headers["tocsin-signature"] == expected
    channel.close()


@pytest.mark.parametrize(("status", "outcome"), [
    (200, Outcome.DELIVERED), (201, Outcome.DELIVERED), (204, Outcome.DELIVERED),
    (400, Outcome.REJECTED), (404, Outcome.REJECTED), (410, Outcome.REJECTED),
    (408, Outcome.RETRY), (429, Outcome.RETRY), (500, Outcome.RETRY), (503, Outcome.RETRY),
])
def test_status_mapping(receiver: Receiver, status: int, outcome: Outcome) -> None:
    receiver.reset(status=status)
    [result] = build_channel(_channel(receiver.url)).send(envelopes(1))
    assert result.outcome is outcome
    assert (result.error is None) == (outcome is Outcome.DELIVERED)


def test_timeout_is_retried(receiver: Receiver) -> None:
    receiver.reset(delay_s=1.0)
    [result] = build_channel(_channel(receiver.url, timeout=0.2)).send(envelopes(1))
    assert result.outcome is Outcome.RETRY and "timeout" in (result.error or "")


def test_connection_refused_is_retried() -> None:
    [result] = build_channel(_channel(f"http://127.0.0.1:{free_port()}")).send(envelopes(1))
    assert result.outcome is Outcome.RETRY


def test_a_slow_endpoint_does_not_serialise_a_batch(receiver: Receiver) -> None:
    import time

    receiver.reset(delay_s=0.2)
    start = time.monotonic()
    results = build_channel(_channel(receiver.url, concurrency=32)).send(envelopes(64))
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert time.monotonic() - start < 64 * 0.2 / 4

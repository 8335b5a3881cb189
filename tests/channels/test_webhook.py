"""The webhook channel against a real HTTP receiver."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook

from tests.channels.envelopes import SECRET, envelopes
from tocsin.channels import build_channel
from tocsin.channels.shared import close_shared
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.api_server import free_port
from tocsin.testing.receiver import Receiver


def _channel(url: str, **config: object) -> ChannelSpec:
    return ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK, config={"url": url, **config})


def test_posts_the_envelope_with_tocsin_headers_and_signature(receiver: Receiver) -> None:
    channel = build_channel(_channel(receiver.url + "/in", secret=SECRET))
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
    assert first.headers["webhook-id"] == "S00000-1"
    assert Webhook(SECRET).verify(first.body, first.headers)["delivery_id"] == "S00000-1"
    assert first.headers["content-type"] == "application/json"
    channel.close()


def test_no_secret_no_signature_and_schedule_headers_win(receiver: Receiver) -> None:
    channel = build_channel(_channel(receiver.url, headers={"Authorization": "Bearer t",
                                                            "X-Trace": "channel"}))
    [result] = channel.send(envelopes(1, headers={"x-trace": "schedule", "x-name": "Zoë"}))
    assert result.outcome is Outcome.DELIVERED
    [got] = receiver.received()
    assert "webhook-signature" not in got.headers and got.headers["webhook-id"] == "S00000-1"
    assert got.headers["authorization"] == "Bearer t"
    assert got.headers["x-trace"] == "schedule"
    assert got.headers["x-name"].encode("latin-1").decode() == "Zoë"  # sent as UTF-8
    channel.close()


def test_a_header_that_cannot_be_sent_is_rejected(receiver: Receiver) -> None:
    channel = build_channel(_channel(receiver.url))
    bad = envelopes(2, headers={"bad name": "v"})
    results = channel.send([*bad, *envelopes(1)])
    assert [r.outcome for r in results] == [Outcome.REJECTED] * 2 + [Outcome.DELIVERED]
    channel.close()


def test_connections_are_kept_alive_between_batches(receiver: Receiver) -> None:
    close_shared()  # a fresh pool: earlier tests' connections to the receiver stay in it
    channel = build_channel(_channel(receiver.url, concurrency=4))
    for _ in range(10):
        assert {r.outcome for r in channel.send(envelopes(20))} == {Outcome.DELIVERED}
    assert len({r.client_port for r in receiver.received()}) <= 4
    channel.close()


@pytest.mark.parametrize(("status", "outcome"), [
    (200, Outcome.DELIVERED), (201, Outcome.DELIVERED), (204, Outcome.DELIVERED),
    (301, Outcome.REJECTED), (302, Outcome.REJECTED), (400, Outcome.REJECTED),
    (404, Outcome.REJECTED), (410, Outcome.REJECTED),
    (408, Outcome.RETRY), (429, Outcome.RETRY), (500, Outcome.RETRY), (503, Outcome.RETRY),
])
def test_status_mapping(receiver: Receiver, status: int, outcome: Outcome) -> None:
    receiver.reset(status=status)
    [result] = build_channel(_channel(receiver.url)).send(envelopes(1))
    assert result.outcome is outcome
    assert (result.error is None) == (outcome is Outcome.DELIVERED)
    if result.error is not None:
        assert result.error.startswith(f"HTTP {status} ")


def test_timeout_is_retried(receiver: Receiver) -> None:
    receiver.reset(delay_s=1.0)
    [result] = build_channel(_channel(receiver.url, timeout=0.2)).send(envelopes(1))
    assert result.outcome is Outcome.RETRY and "timeout" in (result.error or "")


def test_timeout_is_per_request_so_a_batch_gets_its_own_answers(receiver: Receiver) -> None:
    receiver.reset(hold=1)
    channel = build_channel(_channel(receiver.url, timeout=0.5, concurrency=4))
    results = channel.send(envelopes(10))
    receiver.release()
    assert sorted(r.outcome for r in results) == [Outcome.DELIVERED] * 9 + [Outcome.RETRY]
    channel.close()


def test_a_held_request_does_not_hold_up_the_batch(receiver: Receiver) -> None:
    from concurrent.futures import ThreadPoolExecutor

    receiver.reset(hold=1)
    channel = build_channel(_channel(receiver.url, concurrency=4))
    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(channel.send, envelopes(50))
        receiver.wait_held(1)
        receiver.wait_for(49)
        assert not future.done()
        receiver.release()
        assert {r.outcome for r in future.result(30)} == {Outcome.DELIVERED}
    assert len(receiver.received()) == 50
    channel.close()


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


def test_a_large_batch_at_hundreds_per_second(receiver: Receiver) -> None:
    import time

    channel = build_channel(_channel(receiver.url, concurrency=16))
    start = time.monotonic()
    results = channel.send(envelopes(2000))
    elapsed = time.monotonic() - start
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert len({r.json()["delivery_id"] for r in receiver.received()}) == 2000
    # both ends share one GIL on a busy 2-core machine: about 300-500/s here
    assert 2000 / elapsed > 200, f"{2000 / elapsed:.0f} requests/s"
    channel.close()


def test_an_error_answer_is_reported_by_its_status_line_only(receiver: Receiver) -> None:
    receiver.reset(status=500, body=b"db password is hunter2; internal host 10.1.2.3")
    [result] = build_channel(_channel(receiver.url)).send(envelopes(1))
    assert result.outcome is Outcome.RETRY
    assert result.error == "HTTP 500 Internal Server Error"


@pytest.mark.parametrize("status", [429, 503])
def test_retry_after_becomes_the_retry_time_and_pauses_the_channel(receiver: Receiver,
                                                                   status: int) -> None:
    receiver.reset(status=status, headers={"Retry-After": "120"})
    channel = build_channel(_channel(receiver.url, concurrency=1))
    first, second = channel.send(envelopes(2))
    assert first.outcome is Outcome.RETRY and first.retry_after_ms == 120_000
    # the receiver asked for a pause: the rest waits without another request
    assert second.outcome is Outcome.RETRY and 0 < (second.retry_after_ms or 0) <= 120_000
    assert len(receiver.received(None)) == 1
    channel.close()


def test_retry_after_as_an_http_date(receiver: Receiver) -> None:
    from email.utils import format_datetime

    from tocsin.channels.webhook import WebhookChannel
    from tocsin.clock import ManualClock, from_ms

    clock = ManualClock(1_900_000_000_000)
    receiver.reset(status=429, headers={"Retry-After": format_datetime(
        from_ms(clock.now_ms() + 30_000), usegmt=True)})
    channel = WebhookChannel(_channel(receiver.url), clock=clock)
    [result] = channel.send(envelopes(1))
    assert result.retry_after_ms == 30_000
    channel.close()


def test_a_503_without_retry_after_leaves_the_back_off_to_the_dispatcher(
        receiver: Receiver) -> None:
    receiver.reset(status=503)
    [result] = build_channel(_channel(receiver.url)).send(envelopes(1))
    assert result.outcome is Outcome.RETRY and result.retry_after_ms is None


def test_many_requests_are_in_flight_at_once(receiver: Receiver) -> None:
    receiver.reset(hold=20)
    channel = build_channel(_channel(receiver.url, concurrency=20))
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        future = pool.submit(channel.send, envelopes(40))
        receiver.wait_held(20)  # twenty requests wait at the receiver together
        receiver.release()
        assert {r.outcome for r in future.result(30)} == {Outcome.DELIVERED}
    channel.close()

"""The contract every channel kind keeps, run over each against its real server (file, webhook,
Kafka, RabbitMQ, SQS, Redis Streams, NATS and the example plug-in): a batch arrives, one
Result per item, each message carrying its delivery id once; a send ends at its deadline
whatever the destination does; secrets stay out of what is shown and of the errors; and after
its server dies, the same channel answers RETRY and delivers again once it is back."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.channels.harnesses import HARNESSES, Harness, harness_for
from tocsin.channels import validate_channel_config
from tocsin.channels.limits import SendLimits
from tocsin.domain import Envelope, Outcome, PayloadKind
from tocsin.errors import ValidationError
from tocsin.redact import redact
from tocsin.testing.tarpit import Tarpit

KINDS = list(HARNESSES)
SLOW_RESTART = {"rabbitmq"}
"""Kinds whose server takes long to start again (tens of seconds)."""


@pytest.fixture(params=KINDS)
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    """Each kind's harness over the run's server."""
    return harness_for(request.param, request, tmp_path)


def batch(n: int, tag: str, channel: str = "c") -> list[Envelope]:
    """``n`` envelopes of ``channel`` whose delivery ids no other test sends
    (``<tag><now>-<i>-1``)."""
    tag = f"{tag}{time.monotonic_ns()}"
    return [Envelope(schedule_id=f"{tag}-{i}", delivery_id=f"{tag}-{i}-1", attempt=1, epoch=1,
                     tenant="default", channel=channel, payload=b'{"n":%d}' % i,
                     payload_kind=PayloadKind.JSON, due_ms=1_800_000_000_000 + i)
            for i in range(n)]


def assert_arrived_once(harness: Harness, spec: object, sent: list[Envelope]) -> None:
    """Every envelope of ``sent`` arrived at ``spec``'s destination exactly once."""
    got = harness.received(spec)  # type: ignore[arg-type]
    assert [got.count(e.delivery_id) for e in sent] == [1] * len(sent), got


def test_a_batch_arrives_once_with_a_result_per_item(harness: Harness) -> None:
    spec = harness.spec()
    channel = harness.build(spec)
    sent = batch(25, "b", spec.name)
    results = channel.send(sent)
    channel.close()
    assert sorted(r.delivery_id for r in results) == sorted(e.delivery_id for e in sent)
    assert {r.outcome for r in results} == {Outcome.DELIVERED}
    assert_arrived_once(harness, spec, sent)
    assert channel.send([]) == []


def test_a_send_ends_at_its_deadline(harness: Harness) -> None:
    with Tarpit("silent") as pit:
        spec = harness.silent_spec(pit.address)
        if spec is None:
            pytest.skip(f"a {harness.kind} channel reaches no server")
        channel = harness.build(spec, limits=SendLimits(
            timeout_s=1.0, connect_attempts=1, retry_delay_s=0.1, linger_ms=50))
        start = time.monotonic()
        results = channel.send(batch(12, "d"))
        took = time.monotonic() - start
        channel.close()
    assert [r.outcome for r in results] == [Outcome.RETRY] * 12
    assert took < 3, f"a {harness.kind} send to a silent server took {took:.1f} s (cap 1 s)"


def test_secrets_stay_out_of_what_is_shown_and_of_errors(harness: Harness) -> None:
    spec, secret = harness.secret_spec()
    shown = redact(spec.config)
    assert secret not in json.dumps(shown)
    with pytest.raises(ValidationError, match="redaction mark"):
        validate_channel_config(spec.kind, shown)  # a config read back cannot be stored again
    channel = harness.build(spec, limits=SendLimits(timeout_s=2.0, connect_attempts=1,
                                                    retry_delay_s=0.1))
    results = channel.send(batch(3, "s"))
    channel.close()
    assert {r.outcome for r in results} == {Outcome.RETRY}  # nothing listens there
    assert all(secret not in (r.error or "") for r in results), results


def test_a_killed_server_is_retried_and_resumed(harness: Harness,
                                                request: pytest.FixtureRequest) -> None:
    if not harness.outage:
        pytest.skip(f"a {harness.kind} channel has no server")
    if harness.kind.value in SLOW_RESTART and "not slow" in (request.config.option.markexpr
                                                              or ""):
        pytest.skip("restarting this server takes long: run with the slow tests")
    spec = harness.spec()
    channel = harness.build(spec, limits=SendLimits(timeout_s=3.0, connect_attempts=1,
                                                    retry_delay_s=0.1))
    before = batch(5, "k", spec.name)
    assert {r.outcome for r in channel.send(before)} == {Outcome.DELIVERED}
    harness.down()
    try:
        during = batch(5, "k", spec.name)
        assert {r.outcome for r in channel.send(during)} == {Outcome.RETRY}
    finally:
        harness.up(spec)
    deadline = time.monotonic() + 30  # the same deliveries again, as the dispatcher retries
    left = during
    while left and time.monotonic() < deadline:
        results = {r.delivery_id: r for r in channel.send(left)}
        left = [e for e in left if results[e.delivery_id].outcome is not Outcome.DELIVERED]
        time.sleep(0.2 if left else 0)
    channel.close()
    assert not left, f"{len(left)} not delivered 30 s after the server came back"
    assert_arrived_once(harness, spec, during)

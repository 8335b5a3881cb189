"""The recording channel: a fake that records and fails on demand."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels import build_channel
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.testing.recording import recorded, reset


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    reset()
    yield
    reset()


def _channel(name: str = "rec", **config: Any) -> Any:
    return build_channel(ChannelSpec(name=name, kind=ChannelKind.RECORDING, config=config))


def test_records_in_order_per_channel_name() -> None:
    batch = envelopes(5)
    assert {r.outcome for r in _channel().send(batch)} == {Outcome.DELIVERED}
    _channel("other").send(batch[:1])
    assert recorded("rec") == batch
    assert recorded("other") == batch[:1]
    reset()
    assert recorded("rec") == []


@pytest.mark.parametrize(("fail", "outcome"), [("retry", Outcome.RETRY),
                                               ("reject", Outcome.REJECTED)])
def test_fail_alone_fails_everything(fail: str, outcome: Outcome) -> None:
    results = _channel(fail=fail).send(envelopes(4))
    assert {r.outcome for r in results} == {outcome}
    assert all(fail in (r.error or "") for r in results)
    assert recorded("rec") == []


def test_fail_first_then_accept_counts_across_instances() -> None:
    first = _channel(fail="retry", fail_first=3).send(envelopes(2))
    rest = _channel(fail="retry", fail_first=3).send(envelopes(4))  # a rebuilt channel
    outcomes = [r.outcome for r in first + rest]
    assert outcomes == [Outcome.RETRY] * 3 + [Outcome.DELIVERED] * 3


def test_a_seeded_fail_rate_is_deterministic_per_attempt() -> None:
    batch = envelopes(2000)
    one = _channel(fail="retry", fail_rate=0.25, seed=7).send(batch)
    two = _channel("again", fail="retry", fail_rate=0.25, seed=7).send(list(reversed(batch)))
    failed = {r.delivery_id for r in one if r.outcome is Outcome.RETRY}
    assert failed == {r.delivery_id for r in two if r.outcome is Outcome.RETRY}
    assert 400 < len(failed) < 600
    assert len(recorded("rec")) == 2000 - len(failed)
    other_seed = _channel("x", fail="retry", fail_rate=0.25, seed=8).send(batch)
    assert failed != {r.delivery_id for r in other_seed if r.outcome is Outcome.RETRY}
    next_attempt = [e._replace(attempt=2) for e in batch]
    retried = _channel("y", fail="retry", fail_rate=0.25, seed=7).send(next_attempt)
    assert failed != {r.delivery_id for r in retried if r.outcome is Outcome.RETRY}


def test_a_process_that_did_not_ask_refuses_recording_channels() -> None:
    """The fake is no kind of production: without tocsin.testing.use_recording_channels the
    API's validation and build_channel refuse it, naming the kind."""
    code = """
from tocsin.channels import build_channel, validate_channel_config
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.errors import ValidationError
for attempt in (lambda: validate_channel_config(ChannelKind.RECORDING, {}),
                lambda: build_channel(ChannelSpec(name="r", kind=ChannelKind.RECORDING))):
    try:
        attempt()
    except ValidationError as exc:
        assert exc.field == "kind" and "recording" in exc.reason, exc
    else:
        raise SystemExit("accepted")
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr + done.stdout

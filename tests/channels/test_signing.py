"""Standard Webhooks signatures, verified by the standardwebhooks library as a receiver would."""

from __future__ import annotations

import pytest
from standardwebhooks import Webhook
from standardwebhooks.webhooks import WebhookVerificationError

from tests.channels.envelopes import SECRET, SECRET_2, envelopes
from tocsin.channels import build_channel, validate_channel_config
from tocsin.channels.webhook import WebhookChannel
from tocsin.clock import ManualClock
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.testing.receiver import Receiver


def _spec(url: str, secret: object) -> ChannelSpec:
    return ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                       config={"url": url, "secret": secret})


def test_a_receiver_verifies_and_refuses_a_tampered_body(receiver: Receiver) -> None:
    channel = build_channel(_spec(receiver.url, SECRET))
    assert [r.outcome for r in channel.send(envelopes(1))] == [Outcome.DELIVERED]
    channel.close()
    [got] = receiver.received()
    hook = Webhook(SECRET)
    assert hook.verify(got.body, got.headers)["schedule_id"] == "S00000"
    with pytest.raises(WebhookVerificationError):
        hook.verify(got.body.replace(b'"n":0', b'"n":1'), got.headers)
    with pytest.raises(WebhookVerificationError):  # another secret
        Webhook(SECRET_2).verify(got.body, got.headers)


def test_a_replay_cannot_refresh_its_timestamp(receiver: Receiver) -> None:
    channel = build_channel(_spec(receiver.url, SECRET))
    channel.send(envelopes(1))
    channel.close()
    [got] = receiver.received()
    replayed = {**got.headers, "webhook-timestamp": str(int(got.headers["webhook-timestamp"]) + 1)}
    with pytest.raises(WebhookVerificationError):
        Webhook(SECRET).verify(got.body, replayed)


def test_an_old_request_is_refused_by_its_signed_timestamp(receiver: Receiver) -> None:
    clock = ManualClock(1_600_000_000_000)  # the request says it was sent in 2020
    channel = WebhookChannel(_spec(receiver.url, SECRET), clock=clock)
    channel.send(envelopes(1))
    channel.close()
    [got] = receiver.received()
    assert got.headers["webhook-timestamp"] == "1600000000"
    with pytest.raises(WebhookVerificationError, match="too old"):
        Webhook(SECRET).verify(got.body, got.headers)


def test_two_secrets_while_rotating_each_verifies(receiver: Receiver) -> None:
    channel = build_channel(_spec(receiver.url, [SECRET, SECRET_2]))
    channel.send(envelopes(1))
    channel.close()
    [got] = receiver.received()
    assert len(got.headers["webhook-signature"].split(" ")) == 2
    for secret in (SECRET, SECRET_2):
        Webhook(secret).verify(got.body, got.headers)


@pytest.mark.parametrize("secret", ["", "s3cret", "whsec_!!!", "whsec_" + "QUFB" * 4,
                                    [], [SECRET, SECRET, SECRET], 5])
def test_bad_secrets_name_the_field(secret: object) -> None:
    with pytest.raises(ValidationError) as err:
        validate_channel_config(ChannelKind.WEBHOOK, {"url": "http://127.0.0.1/",
                                                      "secret": secret})
    assert err.value.field == "config.secret"

"""Channel configurations are checked at registration and name the bad field."""

from __future__ import annotations

import pytest

from tocsin.channels import validate_channel_config
from tocsin.domain import ChannelKind
from tocsin.errors import ValidationError


@pytest.mark.parametrize(("kind", "config", "field"), [
    (ChannelKind.WEBHOOK, {}, "config.url"),
    (ChannelKind.WEBHOOK, {"url": "ftp://x"}, "config.url"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "timeout": "fast"}, "config.timeout"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "concurrency": 0}, "config.concurrency"),
    (ChannelKind.WEBHOOK, {"url": "http://x", "colour": 1}, "config.colour"),
    (ChannelKind.KAFKA, {"topic": "t"}, "config.bootstrap_servers"),
    (ChannelKind.KAFKA, {"bootstrap_servers": "h:1", "topic": " "}, "config.topic"),
    (ChannelKind.FILE, {"path": 3}, "config.path"),
    (ChannelKind.RECORDING, {"fail": "sometimes"}, "config.fail"),
])
def test_bad_config_names_the_field(kind: ChannelKind, config: dict[str, object],
                                    field: str) -> None:
    with pytest.raises(ValidationError) as err:
        validate_channel_config(kind, config)
    assert err.value.field == field


def test_good_configs_pass() -> None:
    assert validate_channel_config(ChannelKind.WEBHOOK, {"url": "https://h/x", "secret": "s"})
    assert validate_channel_config(ChannelKind.KAFKA, {"bootstrap_servers": "h:1", "topic": "t"})

"""Plug-in channels: the ``tocsin.channels`` entry-point group, through the test kit's
example package (``tests/plugins/tocsin_example_channel``, kind ``example_lines``)."""

from __future__ import annotations

import pytest

from tocsin.channels import build_channel, kinds, missing_library, validate_channel_config
from tocsin.channels.plugins import GROUP, plugin, plugins
from tocsin.channels.policy import DestinationPolicy
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, PayloadKind, Status
from tocsin.errors import ValidationError
from tocsin.redact import redact
from tocsin.testing import LocalDispatcher, ManualClock, memory_store

KIND = ChannelKind("example_lines")
POLICY = DestinationPolicy.build(file_roots=["/tmp"], broker_allow=["127.0.0.0/8"])


@pytest.fixture(autouse=True)
def _installed(lines_server: object) -> None:
    """The example package is installed (the fixture fails under CI when it is not)."""


def test_the_entry_point_adds_a_kind() -> None:
    assert GROUP == "tocsin.channels"
    assert "example_lines" in plugins() and "example_lines" in kinds()
    found = plugin(KIND)
    assert found is not None and found.channel_class.__name__ == "LinesChannel"
    assert not KIND.builtin and ChannelKind.SQS.builtin
    assert missing_library(KIND) is None


def test_a_plugins_config_is_checked_by_the_policy_and_redacted() -> None:
    good = {"address": "127.0.0.1:9", "token": "tkn-1"}
    assert validate_channel_config(KIND, good, POLICY) == good
    assert redact(good)["token"] == "***"
    for bad, field in [({"address": "nowhere"}, "config.address"),
                       ({"address": "10.0.0.1:9"}, "config.address"),
                       ({"address": "169.254.169.254:80"}, "config.address"),
                       ({**good, "timeout": "soon"}, "config.timeout"),
                       ({**good, "bogus": 1}, "config.bogus")]:
        with pytest.raises(ValidationError) as err:
            validate_channel_config(KIND, bad, POLICY)
        assert err.value.field == field, bad
    with pytest.raises(ValidationError, match="redaction mark"):
        validate_channel_config(KIND, redact(good), POLICY)


def test_a_kind_no_package_provides_is_refused_naming_what_to_install() -> None:
    ghost = ChannelKind("ghost_queue")
    with pytest.raises(ValidationError) as err:
        validate_channel_config(ghost, {}, POLICY)
    assert err.value.field == "kind" and "example_lines" in err.value.reason
    with pytest.raises(ValidationError):
        build_channel(ChannelSpec(name="g", kind=ghost))
    assert "'tocsin.channels' entry point is 'ghost_queue'" in (missing_library(ghost) or "")
    with pytest.raises(ValueError):
        ChannelKind("Not A Kind")


def test_a_plugin_gets_the_dispatchers_retry_and_dead_rules(lines_server: object) -> None:
    clock = ManualClock(1_900_000_000_000)
    store = memory_store()
    store.put_channel(ChannelSpec(name="lines", kind=KIND, config={
        "address": lines_server.address, "max_attempts": 2}))  # type: ignore[attr-defined]
    (ok, _), (refused, _) = store.create([
        NewSchedule(channel="lines", payload=b"fine", payload_kind=PayloadKind.TEXT,
                    due_ms=clock.now_ms()),
        NewSchedule(channel="lines", payload=b"refuse", payload_kind=PayloadKind.TEXT,
                    due_ms=clock.now_ms())], now_ms=clock.now_ms())
    local = LocalDispatcher(store, clock=clock)
    try:
        tally = local.run_until_idle()
    finally:
        local.close()
    assert (tally.delivered, tally.dead) == (1, 1)
    assert store.get(ok.id).status is Status.DELIVERED
    assert store.get(refused.id).status is Status.DEAD  # REJECTED: no retry
    assert store.deliveries(refused.id)[-1].error == "lines: refused"
    store.close()

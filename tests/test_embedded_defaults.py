"""``tocsin up`` lets webhooks and brokers reach this machine through one explicit setting,
``allow_loopback``, which it turns on unless the operator set it and prints at start; the bind
address decides nothing (an API on loopback behind a TLS proxy serves remote users)."""

from __future__ import annotations

import ipaddress

import pytest

from tocsin.channels.policy import DestinationPolicy
from tocsin.cli.runner import embedded_defaults
from tocsin.config import Settings


def test_tocsin_up_allows_loopback_explicitly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCSIN_ALLOW_LOOPBACK", raising=False)
    monkeypatch.delenv("TOCSIN_WEBHOOK_ALLOW", raising=False)
    for host in ("127.0.0.1", "0.0.0.0", "10.1.2.3"):
        up = embedded_defaults(Settings(api_host=host))
        assert up.allow_loopback is True and up.webhook_allow == []
        assert up.environment()["TOCSIN_ALLOW_LOOPBACK"] == "True", "the dispatcher inherits it"
        policy = DestinationPolicy.from_settings(up)
        assert policy.allows_address(ipaddress.ip_address("127.0.0.1"))
        assert policy.for_brokers().allows_address(ipaddress.ip_address("::1"))
        assert not policy.allows_address(ipaddress.ip_address("10.0.0.1"))


def test_an_operator_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """Behind a proxy on this machine the operator turns it off, and it stays off."""
    monkeypatch.setenv("TOCSIN_ALLOW_LOOPBACK", "false")
    monkeypatch.delenv("TOCSIN_WEBHOOK_ALLOW", raising=False)
    monkeypatch.delenv("TOCSIN_BROKER_ALLOW", raising=False)
    up = embedded_defaults(Settings(api_host="127.0.0.1"))
    assert up.allow_loopback is False
    policy = DestinationPolicy.from_settings(up)
    assert not policy.allows_address(ipaddress.ip_address("127.0.0.1"))
    assert not policy.for_brokers().allows_address(ipaddress.ip_address("127.0.0.1"))


def test_a_server_never_allows_loopback_by_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tocsin api`` and ``tocsin dispatcher`` read the settings as they are: off."""
    for name in ("TOCSIN_ALLOW_LOOPBACK", "TOCSIN_WEBHOOK_ALLOW", "TOCSIN_BROKER_ALLOW"):
        monkeypatch.delenv(name, raising=False)
    for host in ("127.0.0.1", "::1", "localhost"):
        policy = DestinationPolicy.from_settings(Settings(api_host=host))
        assert not policy.allows_address(ipaddress.ip_address("127.0.0.1"))
        assert not policy.for_brokers().allows_address(ipaddress.ip_address("127.0.0.1"))

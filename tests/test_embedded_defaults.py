"""``tocsin up`` on a loopback API lets webhooks reach this machine; nothing else does."""

from __future__ import annotations

import pytest

from tocsin.cli.runner import LOOPBACK, embedded_defaults
from tocsin.config import Settings


def test_tocsin_up_on_loopback_allows_local_receivers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCSIN_WEBHOOK_ALLOW", raising=False)
    assert embedded_defaults(Settings(api_host="127.0.0.1")).webhook_allow == LOOPBACK


def test_an_operator_choice_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_WEBHOOK_ALLOW", "")
    assert embedded_defaults(Settings(api_host="127.0.0.1")).webhook_allow == []
    monkeypatch.setenv("TOCSIN_WEBHOOK_ALLOW", "10.0.0.0/8")
    assert embedded_defaults(Settings(api_host="127.0.0.1")).webhook_allow == ["10.0.0.0/8"]


def test_an_api_on_another_address_keeps_the_strict_default(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCSIN_WEBHOOK_ALLOW", raising=False)
    assert embedded_defaults(Settings(api_host="0.0.0.0")).webhook_allow == []

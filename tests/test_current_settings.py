"""Settings as they are now: read again at once when a ``TOCSIN_`` variable changes, and
not at all while nothing does (every channel build asks)."""

from __future__ import annotations

import pytest

from tocsin.config import current_settings


def test_current_settings_follow_a_changed_variable_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCSIN_WEBHOOK_CONNECTIONS_MAX", raising=False)
    first = current_settings()
    assert current_settings() is first, "nothing changed: the same settings"
    monkeypatch.setenv("TOCSIN_WEBHOOK_CONNECTIONS_MAX", str(first.webhook_connections_max + 1))
    assert current_settings().webhook_connections_max == first.webhook_connections_max + 1
    monkeypatch.setenv("PATH_OF_SOMETHING_ELSE", "x")  # not Tocsin's: the same settings
    changed = current_settings()
    assert current_settings() is changed
    monkeypatch.delenv("TOCSIN_WEBHOOK_CONNECTIONS_MAX")
    assert current_settings().webhook_connections_max == first.webhook_connections_max

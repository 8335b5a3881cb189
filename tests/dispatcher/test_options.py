"""The dispatcher's options carry the settings' defaults, written once (in config.py)."""

from __future__ import annotations

from dataclasses import asdict, replace

import pytest

from tocsin.config import Settings
from tocsin.dispatcher.options import DispatchOptions


def test_the_options_defaults_are_the_settings_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in Settings.model_fields:
        monkeypatch.delenv(f"TOCSIN_{name.upper()}", raising=False)
    settings = Settings(_env_file=None)  # type: ignore[call-arg]
    from_settings = DispatchOptions.from_settings(settings)
    assert asdict(replace(from_settings, store_url="")) == asdict(DispatchOptions(store_url=""))


def test_options_survive_sparks_string_options() -> None:
    options = DispatchOptions(store_url="sqlite:///x.db", partitions=3, relay=1, run="r1")
    assert DispatchOptions.from_spark(options.to_spark()) == options

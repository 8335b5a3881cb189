"""Channels: one module per transport. ``build_channel(spec)`` imports the kind's module lazily."""

from __future__ import annotations

from importlib import import_module
from typing import Any

from tocsin.abc import Channel
from tocsin.domain import ChannelKind, ChannelSpec

__all__ = ["build_channel", "validate_channel_config"]

_MODULES = {
    ChannelKind.FILE: ("tocsin.channels.file", "FileChannel"),
}


def build_channel(spec: ChannelSpec) -> Channel:
    """A live channel for ``spec``."""
    module, cls = _MODULES[spec.kind]
    channel: Channel = getattr(import_module(module), cls)(spec)
    return channel


def validate_channel_config(kind: ChannelKind, config: dict[str, Any]) -> dict[str, Any]:
    """The config, normalised; ValidationError naming ``config.<field>`` when it is bad."""
    return config

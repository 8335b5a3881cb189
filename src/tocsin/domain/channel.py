"""Channels as the store keeps them: a name, a kind, and the kind's configuration."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tocsin.domain.tenant import DEFAULT_TENANT
from tocsin.errors import ValidationError

__all__ = ["ChannelKind", "ChannelSpec", "OnDead"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


class ChannelKind(StrEnum):
    """The transports Tocsin can deliver to."""

    FILE = "file"
    """JSON lines appended to one file per channel."""
    WEBHOOK = "webhook"
    """An HTTP POST of the JSON envelope."""
    KAFKA = "kafka"
    """A Kafka topic (any Kafka-protocol broker)."""
    RABBITMQ = "rabbitmq"
    """A RabbitMQ queue or exchange."""
    RECORDING = "recording"
    """Kept in memory by the worker process: a fake for tests."""


class OnDead(StrEnum):
    """What a dead schedule does to the rest of its ordering key (channel setting ``on_dead``)."""

    CONTINUE = "continue"
    """The key's next schedule goes on (the default)."""
    HALT = "halt"
    """The key waits until it is resumed (``POST /v1/ordering-keys/{key}/resume``)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ChannelSpec:
    """A registered channel. ``config`` is validated by the kind's implementation. Channels
    are namespaced by tenant: the same name in two tenants is two channels."""

    name: str
    kind: ChannelKind
    config: dict[str, Any] = field(default_factory=dict)
    tenant: str = DEFAULT_TENANT

    def __post_init__(self) -> None:
        if not _NAME.fullmatch(self.name):
            raise ValidationError(
                "name",
                "must be 1-128 letters, digits, '.', '_' or '-', starting with a letter or digit",
            )

    @property
    def dead_letter(self) -> str | None:
        """The channel (of the same tenant) that receives a copy of what dies here, if any."""
        value = self.config.get("dead_letter")
        return str(value) if value else None

    @property
    def on_dead(self) -> OnDead:
        """What a dead schedule does to its ordering key here."""
        return OnDead(self.config.get("on_dead", OnDead.CONTINUE))

    @property
    def halts_on_dead(self) -> bool:
        """True when a dead schedule halts its ordering key (``on_dead: halt``) rather than
        letting the key's next schedule go (``continue``, the default)."""
        return self.on_dead is OnDead.HALT

    @property
    def max_attempts(self) -> int | None:
        """This channel's own limit on attempts, overriding the global one."""
        value = self.config.get("max_attempts")
        return int(value) if value is not None else None

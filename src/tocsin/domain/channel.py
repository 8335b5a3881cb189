"""Channels as the store keeps them: a name, a kind, and the kind's configuration."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tocsin.domain.retry import RetryTerms
from tocsin.domain.tenant import DEFAULT_TENANT
from tocsin.errors import ValidationError

__all__ = ["ChannelKind", "ChannelSpec", "HoldReason", "OnDead"]

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


_PLUGIN_KIND = re.compile(r"[a-z][a-z0-9_]{0,62}")
"""What a plug-in's kind may be called (the name of its ``tocsin.channels`` entry point)."""


class ChannelKind(StrEnum):
    """The transports Tocsin can deliver to. A plug-in's kind (an entry point of the
    ``tocsin.channels`` group, :mod:`tocsin.channels.plugins`) is a member made when first
    named: ``ChannelKind("acme_queue")`` is a kind whose channels are built only where its
    package is installed; any other unknown name is a ValueError."""

    FILE = "file"
    """JSON lines appended to one file per channel."""
    WEBHOOK = "webhook"
    """An HTTP POST of the JSON envelope."""
    KAFKA = "kafka"
    """A Kafka topic (any Kafka-protocol broker)."""
    RABBITMQ = "rabbitmq"
    """A RabbitMQ queue or exchange."""
    SQS = "sqs"
    """An Amazon SQS queue, standard or FIFO (any SQS-protocol service)."""
    REDIS_STREAMS = "redis_streams"
    """A Redis stream (``XADD``)."""
    NATS = "nats"
    """A NATS JetStream subject."""
    RECORDING = "recording"
    """Kept in memory by the worker process: a fake for tests."""

    @classmethod
    def _missing_(cls, value: object) -> ChannelKind | None:
        """A plug-in's kind: a member made for a well-formed name (lower-case letters, digits
        and ``_``), so a stored channel of a plug-in reads back even where the plug-in is not
        installed (its channels are then refused when built, naming what is missing)."""
        if not isinstance(value, str) or not _PLUGIN_KIND.fullmatch(value):
            return None
        member = str.__new__(cls, value)
        member._name_ = value.upper()
        member._value_ = value
        return cls._value2member_map_.setdefault(value, member)  # type: ignore[return-value]

    @property
    def builtin(self) -> bool:
        """Whether Tocsin itself defines this kind (not a plug-in's)."""
        return self._name_ in type(self).__members__


class HoldReason(StrEnum):
    """Why the dispatcher passes over a destination (a tenant's channel) in its claims: the
    ``reason`` of a :class:`~tocsin.abc.ChannelHold`, spelled so in the store."""

    BUSY = "busy"
    """A dispatcher process has a full queue for it, or pulls its backlog itself (one hold
    per process, ended by that process alone)."""
    OPEN = "open"
    """Its circuit breaker is open: nothing goes until the probe (one hold per destination)."""
    UNDELIVERABLE = "undeliverable"
    """A dispatcher's machine cannot deliver to its kind (a plug-in not installed, a client
    library missing; ``last_error`` says what to install): that run passes it over in the
    buckets it owns, its rows PENDING with no attempt spent, renewed while the run lives."""


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

    @property
    def events(self) -> str | None:
        """The channel (of the same tenant) that gets this channel's outcome events."""
        value = self.config.get("events")
        return str(value) if value else None

    @property
    def events_attempts(self) -> bool:
        """Whether every attempt (not only the final outcome) makes an event."""
        return bool(self.config.get("events_attempts", False))

    @property
    def max_lateness_ms(self) -> int | None:
        """This channel's default ``max_lateness`` (config, seconds): a schedule that would go
        out this long or more after its due time expires instead (None: never)."""
        value = self.config.get("max_lateness")
        return None if value is None else int(float(value) * 1000)

    @property
    def retry_terms(self) -> RetryTerms | None:
        """This channel's retry policy overrides (config ``retry``, durations in seconds)."""
        value = self.config.get("retry")
        return retry_terms_of(value) if value else None


_RETRY_SECONDS = {"base": "base_ms", "cap": "cap_ms", "max_retry_duration": "max_duration_ms"}


def retry_terms_of(value: dict[str, Any]) -> RetryTerms:
    """A ``retry`` object as the API and channel configs spell it (durations in seconds,
    already validated) as :class:`RetryTerms`."""
    given: dict[str, Any] = {}
    for name, item in value.items():
        if item is None:
            continue
        if name in _RETRY_SECONDS:
            given[_RETRY_SECONDS[name]] = int(float(item) * 1000)
        elif name == "max_attempts":
            given[name] = int(item)
        else:
            given[name] = float(item)
    return RetryTerms(**given)

"""Channels: one module per transport, behind :class:`tocsin.abc.Channel`.

``build_channel(spec)`` imports the kind's module lazily, so importing Tocsin never imports
httpx transports, confluent-kafka or pika; ``validate_channel_config`` checks a registration
before it is stored and names the bad field.

=============  ===========================================  ==================================
kind           class (config)                               module
=============  ===========================================  ==================================
``file``       ``FileChannel`` (``FileConfig``)             :mod:`tocsin.channels.file`
``webhook``    ``WebhookChannel`` (``WebhookConfig``)       :mod:`tocsin.channels.webhook`
``kafka``      ``KafkaChannel`` (``KafkaConfig``)           :mod:`tocsin.channels.kafka`
``rabbitmq``   ``RabbitMQChannel`` (``RabbitMQConfig``)     :mod:`tocsin.channels.rabbitmq`
``recording``  ``RecordingChannel`` (``RecordingConfig``)   :mod:`tocsin.channels.recording`
=============  ===========================================  ==================================

Every kind also takes the common settings ``dead_letter``, ``max_attempts`` and ``on_dead``
(see :class:`~tocsin.domain.ChannelSpec`).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from tocsin.abc import Channel
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.errors import ValidationError

if TYPE_CHECKING:
    from tocsin.channels.recording import Recordings

__all__ = ["build_channel", "validate_channel_config"]

_MODULES: dict[ChannelKind, tuple[str, str, str]] = {
    ChannelKind.FILE: ("tocsin.channels.file", "FileChannel", "FileConfig"),
    ChannelKind.WEBHOOK: ("tocsin.channels.webhook", "WebhookChannel", "WebhookConfig"),
    ChannelKind.KAFKA: ("tocsin.channels.kafka", "KafkaChannel", "KafkaConfig"),
    ChannelKind.RABBITMQ: ("tocsin.channels.rabbitmq", "RabbitMQChannel", "RabbitMQConfig"),
    ChannelKind.RECORDING: ("tocsin.channels.recording", "RecordingChannel", "RecordingConfig"),
}


def build_channel(spec: ChannelSpec, *, recordings: Recordings | None = None) -> Channel:
    """A live channel for ``spec``; a recording channel records in ``recordings`` (by default
    the process's :data:`~tocsin.channels.recording.DEFAULT_RECORDINGS`)."""
    module, cls, _ = _MODULES[spec.kind]
    if spec.kind is ChannelKind.RECORDING:
        from tocsin.channels.recording import RecordingChannel

        return RecordingChannel(spec, recordings)
    channel: Channel = getattr(import_module(module), cls)(spec)
    return channel


def validate_channel_config(kind: ChannelKind, config: dict[str, Any]) -> dict[str, Any]:
    """The config as it will be stored (normalised, e.g. a file path made absolute);
    :class:`~tocsin.errors.ValidationError` naming ``config.<field>`` when it is bad."""
    from tocsin.channels.config import parse_config

    if kind not in _MODULES:
        raise ValidationError("kind", f"{kind!r} is not one of {', '.join(_MODULES)}")
    module, _, config_cls = _MODULES[kind]
    parsed = parse_config(getattr(import_module(module), config_cls), dict(config))
    normalise = getattr(parsed, "normalised", None)
    return normalise() if normalise is not None else dict(config)

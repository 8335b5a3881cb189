"""Channels: one module per transport, behind :class:`tocsin.abc.Channel`.

``build_channel(spec)`` imports the kind's module lazily, so importing Tocsin never imports
aiohttp, confluent-kafka, pika, boto3, redis or nats; ``validate_channel_config`` checks a
registration before it is stored and names the bad field, including where the operator's
:class:`~tocsin.channels.policy.DestinationPolicy` forbids delivering (docs/security.md) and a
kind whose client library this machine lacks (:func:`missing_library`).

=================  ===============================================  ==============================
kind               class (config)                                   module
=================  ===============================================  ==============================
``file``           ``FileChannel`` (``FileConfig``)                 :mod:`.file`
``webhook``        ``WebhookChannel`` (``WebhookConfig``)           :mod:`.webhook`
``kafka``          ``KafkaChannel`` (``KafkaConfig``)               :mod:`.kafka`
``rabbitmq``       ``RabbitMQChannel`` (``RabbitMQConfig``)         :mod:`.rabbitmq`
``sqs``            ``SQSChannel`` (``SQSConfig``)                   :mod:`.sqs`
``redis_streams``  ``RedisStreamsChannel`` (``RedisStreamsConfig``) :mod:`.redis_streams`
``nats``           ``NatsChannel`` (``NatsConfig``)                 :mod:`.nats`
=================  ===============================================  ==============================

Every kind also takes the common settings ``dead_letter``, ``max_attempts`` and ``on_dead``
(see :class:`~tocsin.domain.ChannelSpec`). A process may accept more kinds when asked
(:func:`register_kind`): the test kit's ``recording`` fake, only where a test calls
:func:`tocsin.testing.use_recording_channels`; and installed packages add kinds through the
``tocsin.channels`` entry-point group (:mod:`tocsin.channels.plugins`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any

from tocsin.abc import Channel
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.domain import DEFAULT_TENANT, ChannelKind, ChannelSpec
from tocsin.errors import ValidationError

__all__ = ["ChannelBuilder", "build_channel", "builds_quickly", "client_library", "kinds",
           "missing_library", "register_kind", "validate_channel_config"]

ChannelBuilder = Callable[[ChannelSpec], Channel]
"""Makes a live channel from its spec."""

_MODULES: dict[ChannelKind, tuple[str, str, str]] = {
    ChannelKind.FILE: ("tocsin.channels.file", "FileChannel", "FileConfig"),
    ChannelKind.WEBHOOK: ("tocsin.channels.webhook", "WebhookChannel", "WebhookConfig"),
    ChannelKind.KAFKA: ("tocsin.channels.kafka", "KafkaChannel", "KafkaConfig"),
    ChannelKind.RABBITMQ: ("tocsin.channels.rabbitmq", "RabbitMQChannel", "RabbitMQConfig"),
    ChannelKind.SQS: ("tocsin.channels.sqs", "SQSChannel", "SQSConfig"),
    ChannelKind.REDIS_STREAMS: ("tocsin.channels.redis_streams", "RedisStreamsChannel",
                                "RedisStreamsConfig"),
    ChannelKind.NATS: ("tocsin.channels.nats", "NatsChannel", "NatsConfig"),
}
"""The transports: (module, channel class, config class) by kind."""
_REGISTERED: dict[ChannelKind, tuple[str, str, str]] = {}
"""Kinds this process was asked to accept besides the transports (:func:`register_kind`)."""

_LIBRARIES: dict[ChannelKind, tuple[str, str, str]] = {
    ChannelKind.KAFKA: ("confluent_kafka", "confluent-kafka", "kafka"),
    ChannelKind.RABBITMQ: ("pika", "pika", "rabbitmq"),
    ChannelKind.SQS: ("boto3", "boto3", "sqs"),
    ChannelKind.REDIS_STREAMS: ("redis", "redis", "redis"),
    ChannelKind.NATS: ("nats", "nats-py", "nats"),
}
"""The client library a kind delivers through, when it is an optional one: (module, package,
extra)."""


def missing_library(kind: ChannelKind) -> str | None:
    """What to install so that this machine can deliver to ``kind``'s channels, or None when
    it can (its library imports, or it needs none)."""
    if not kind.builtin:
        from tocsin.channels.plugins import plugins

        if kind.value not in plugins():
            return (f"{kind.value} channels come from a plug-in that is not installed here: "
                    f"install the package whose 'tocsin.channels' entry point is {kind.value!r}")
        return None
    needed = _LIBRARIES.get(kind)
    if needed is None:
        return None
    module, package, extra = needed
    try:
        import_module(module)
    except ImportError:
        return (f"{kind.value} channels need {package}, which is not installed here: "
                f"pip install 'tocsin[{extra}]' (or 'tocsin[all]')")
    return None


def client_library(kind: ChannelKind) -> Any:
    """The client library ``kind`` delivers through, imported (its channel's constructor asks);
    ImportError saying what to install (:func:`missing_library`) when this machine lacks it."""
    module = _LIBRARIES[kind][0]
    try:
        return import_module(module)
    except ImportError as exc:
        raise ImportError(missing_library(kind) or str(exc)) from exc


def register_kind(kind: ChannelKind, module: str, channel_class: str, config_class: str) -> None:
    """Accept and build channels of ``kind`` in this process, from ``module``'s classes: for a
    kind that is no transport (the test kit's ``recording``)."""
    _REGISTERED[kind] = (module, channel_class, config_class)


def _classes(kind: ChannelKind) -> tuple[type[Channel], type]:
    """``kind``'s channel and config classes, loaded; ValidationError on ``kind`` when this
    process does not take it."""
    found = _MODULES.get(kind) or _REGISTERED.get(kind)
    if found is not None:
        module = import_module(found[0])
        return getattr(module, found[1]), getattr(module, found[2])
    from tocsin.channels.plugins import plugin, plugins

    try:
        loaded = plugin(kind) if isinstance(kind, ChannelKind) else None
    except ImportError as exc:
        raise ValidationError("kind", str(exc)) from None
    if loaded is None:
        known = ", ".join(sorted({*(k.value for k in (*_MODULES, *_REGISTERED)), *plugins()}))
        given = kind.value if isinstance(kind, ChannelKind) else kind
        raise ValidationError("kind", f"{given!r} is not one of {known}")
    return loaded.channel_class, loaded.config_class


def builds_quickly(kind: ChannelKind) -> bool:
    """Whether a channel of ``kind`` is made without I/O, in well under a millisecond
    (:attr:`~tocsin.abc.Channel.quick_build`); False for a kind this process does not take."""
    try:
        return bool(_classes(kind)[0].quick_build)
    except ValidationError:
        return False


def kinds() -> list[str]:
    """Every kind this process takes: the transports, kinds registered here, and plug-ins."""
    from tocsin.channels.plugins import plugins

    return [*(k.value for k in (*_MODULES, *_REGISTERED)), *sorted(plugins())]


def build_channel(spec: ChannelSpec, *,
                  builders: Mapping[ChannelKind, ChannelBuilder] | None = None,
                  policy: DestinationPolicy | None = None) -> Channel:
    """A live channel for ``spec``, made by ``builders``' entry for its kind when there is
    one, under ``policy`` (default: this process's settings'); a
    :class:`~tocsin.errors.ValidationError` for a kind this process does not take."""
    if builders and (builder := builders.get(spec.kind)) is not None:
        return builder(spec)
    cls: Any = _classes(spec.kind)[0]
    if policy is None or spec.kind in _REGISTERED:  # the test kit's fakes take no policy
        channel: Channel = cls(spec)
    else:
        channel = cls(spec, policy=policy)
    return channel


def validate_channel_config(kind: ChannelKind, config: dict[str, Any],
                            policy: DestinationPolicy | None = None, *,
                            tenant: str = DEFAULT_TENANT) -> dict[str, Any]:
    """The config as it will be stored for ``tenant``; :class:`~tocsin.errors.ValidationError`
    naming ``config.<field>`` when it is bad or ``policy`` (default: this process's settings)
    forbids the destination."""
    from tocsin.channels.config import COMMON, parse_config
    from tocsin.redact import masked

    config_cls = _classes(kind)[1]
    if (lacking := missing_library(kind)) is not None:  # a dispatcher like this one could not
        raise ValidationError("kind", lacking)           # deliver to it
    if (where := masked(config)) is not None:
        raise ValidationError(f"config.{where}", "is the redaction mark '***': send the secret "
                                                 "itself (secrets are write-only)")
    parsed: Any = parse_config(config_cls, dict(config))
    admit = getattr(parsed, "admit", None)
    policy = (policy or current_policy()).for_tenant(tenant)
    admitted: dict[str, Any] | None = admit(policy) if admit else None
    if admitted is None:  # stored as given
        return dict(config)
    return {**admitted, **{k: v for k, v in config.items() if k in COMMON}}

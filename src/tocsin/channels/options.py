"""What a caller may set on a channel: server URLs and send deadlines as every channel reads
them (:func:`server_url`, :func:`check_seconds`), and the client options of Kafka and RabbitMQ
channels, an allow-list.

Anything not listed is refused, naming it: librdkafka settings such as ``plugin.library.paths``
or ``ssl.engine.location`` (load a native library into the dispatcher),
``sasl.kerberos.kinit.cmd`` (runs a command), OIDC token endpoints (requests to any URL), and
pika URL options such as ``ssl_options`` (arbitrary keyword arguments of the TLS layer).
Options naming a file (``ssl.ca.location``...) must name one under the policy's
``credential_roots``, checked like a file channel's path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, parse_qsl, urlsplit

from tocsin.channels.paths import place
from tocsin.channels.policy import DestinationPolicy
from tocsin.errors import ValidationError

__all__ = ["KAFKA_CLIENT_OPTIONS", "KAFKA_FILE_OPTIONS", "KAFKA_OPTIONS", "MAX_SECONDS",
           "RABBITMQ_URL_OPTIONS", "check_amqp_url", "check_kafka_producer", "check_seconds",
           "kafka_client_settings", "server_url"]

MAX_SECONDS = 3600
"""The longest deadline a channel's configuration may give one send."""

KAFKA_OPTIONS = frozenset({
    # delivery and batching
    "acks", "batch.num.messages", "batch.size", "compression.codec", "compression.level",
    "compression.type", "delivery.timeout.ms", "linger.ms", "max.in.flight",
    "max.in.flight.requests.per.connection", "message.max.bytes", "message.send.max.retries",
    "message.timeout.ms", "queue.buffering.max.kbytes", "queue.buffering.max.messages",
    "queue.buffering.max.ms", "request.timeout.ms", "retries", "retry.backoff.max.ms",
    "retry.backoff.ms", "sticky.partitioning.linger.ms", "partitioner",
    # connections
    "broker.address.family", "client.id", "client.rack", "connections.max.idle.ms",
    "metadata.max.age.ms", "reconnect.backoff.max.ms", "reconnect.backoff.ms",
    "socket.connection.setup.timeout.ms", "socket.keepalive.enable", "socket.nagle.disable",
    "socket.timeout.ms", "topic.metadata.refresh.interval.ms",
    # security: TLS and SASL (PLAIN, SCRAM, OAUTHBEARER with a static token)
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
    "ssl.certificate.pem", "ssl.cipher.suites", "ssl.curves.list",
    "ssl.endpoint.identification.algorithm", "ssl.key.location", "ssl.key.password",
    "ssl.key.pem", "ssl.sigalgs.list", "enable.ssl.certificate.verification",
})
"""librdkafka producer settings a Kafka channel's ``producer`` may hold."""
KAFKA_CLIENT_OPTIONS = frozenset({
    "broker.address.family", "client.id", "client.rack", "connections.max.idle.ms",
    "metadata.max.age.ms", "reconnect.backoff.max.ms", "reconnect.backoff.ms",
    "socket.connection.setup.timeout.ms", "socket.keepalive.enable", "socket.nagle.disable",
    "socket.timeout.ms", "request.timeout.ms",
    "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.username",
    "sasl.password", "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location",
    "ssl.certificate.pem", "ssl.cipher.suites", "ssl.curves.list",
    "ssl.endpoint.identification.algorithm", "ssl.key.location", "ssl.key.password",
    "ssl.key.pem", "ssl.sigalgs.list", "enable.ssl.certificate.verification",
})
"""librdkafka settings the commands topic's consumer and producer take
(``TOCSIN_INGEST_KAFKA``): TLS, SASL and connections, nothing that loads code or runs it."""
KAFKA_FILE_OPTIONS = frozenset({"ssl.ca.location", "ssl.certificate.location",
                                "ssl.key.location"})
"""Those among them that name a file, which must lie under ``credential_roots``."""
RABBITMQ_URL_OPTIONS = frozenset({
    "blocked_connection_timeout", "channel_max", "connection_attempts", "frame_max",
    "heartbeat", "locale", "retry_delay", "socket_timeout", "stack_timeout",
})
"""pika ``URLParameters`` query options an AMQP URL may hold."""


def server_url(url: str, schemes: tuple[str, ...], *, what: str, field: str = "config.url",
               named: bool = False) -> SplitResult:
    """``url`` split as urllib splits it (the host the clients connect to, as they read it);
    ValidationError naming ``field`` when it is no URL, its port is bad, or its scheme is not
    one of ``schemes`` or it has no host (``is not <what> with a host``). ``named``: the
    message begins with the URL (a field that holds several)."""
    quoted = f"{url!r} " if named else ""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise ValidationError(field, f"{quoted}is not a URL: {exc}") from None
    if parts.scheme not in schemes or not parts.hostname:
        raise ValidationError(field, f"{quoted}is not {what} with a host")
    return parts


def check_seconds(seconds: float, field: str) -> None:
    """ValidationError naming ``field`` unless ``seconds`` is more than 0 and at most
    :data:`MAX_SECONDS` (a send's deadline)."""
    if not 0 < seconds <= MAX_SECONDS:
        raise ValidationError(field, f"must be more than 0 and at most {MAX_SECONDS}")


def check_kafka_producer(producer: Mapping[str, Any], policy: DestinationPolicy) -> None:
    """ValidationError naming ``config.producer.<option>`` for a refused option."""
    for name, value in producer.items():
        field = f"config.producer.{name}"
        if name not in KAFKA_OPTIONS:
            raise ValidationError(field, "is not an option a channel may set (see "
                                         "docs/security.md for the allowed ones)")
        if name in KAFKA_FILE_OPTIONS:
            if not isinstance(value, str):
                raise ValidationError(field, "must be a path")
            place(value, _credentials(policy, field), field=field)
        elif not isinstance(value, str | int | float | bool):
            raise ValidationError(field, "must be a string, number or boolean")


def kafka_client_settings(entries: list[str], *, field: str = "ingest_kafka") -> dict[str, str]:
    """``NAME=VALUE`` entries as librdkafka settings; ValidationError naming ``field`` for an
    entry without ``=`` or a setting outside :data:`KAFKA_CLIENT_OPTIONS`."""
    found: dict[str, str] = {}
    for entry in entries:
        name, sep, value = entry.partition("=")
        name = name.strip()
        if not sep:
            raise ValidationError(field, f"{name!r} is not NAME=VALUE")
        if name not in KAFKA_CLIENT_OPTIONS:
            raise ValidationError(field, f"{name!r} is not a setting the commands topic's "
                                         "clients take (TLS, SASL and connection settings)")
        found[name] = value.strip()
    return found


def check_amqp_url(url: str, policy: DestinationPolicy) -> None:
    """ValidationError naming ``config.url`` for a refused query option, or a broker the
    policy refuses (:func:`~tocsin.channels.addresses.check_amqp_broker`: the host pika
    connects to)."""
    from tocsin.channels.addresses import check_amqp_broker

    check_amqp_broker(url, policy)
    for name, _ in parse_qsl(urlsplit(url).query, keep_blank_values=True):
        if name not in RABBITMQ_URL_OPTIONS:
            allowed = ", ".join(sorted(RABBITMQ_URL_OPTIONS))
            raise ValidationError("config.url", f"option {name!r} is not one a channel may set "
                                                f"(allowed: {allowed})")


def _credentials(policy: DestinationPolicy, field: str) -> DestinationPolicy:
    if not policy.credential_roots:
        raise ValidationError(field, "no credential_roots are configured")
    return DestinationPolicy(file_roots=policy.credential_roots, reserved=policy.reserved)

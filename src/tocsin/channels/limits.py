"""Send limits: every send has a deadline that a tenant cannot lengthen.

A channel's own options (a webhook's ``timeout``, a Kafka channel's ``flush_timeout`` and
producer timeouts, a RabbitMQ URL's ``connection_attempts``, ``retry_delay`` and socket
timeouts) are what the tenant asked for; :class:`SendLimits` are what the operator allows
(``TOCSIN_SEND_*`` settings, docs/configuration.md). A channel applies the smaller of the two
when it is built, so one send to one destination ends within ``timeout_s`` whatever the
destination does; the dispatcher's delivery engine (:mod:`tocsin.dispatcher.engine`) also
stops waiting for a send at that deadline, as the last guard against a transport that hangs
anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tocsin.config import Settings

__all__ = ["KAFKA_LINGER_OPTIONS", "KAFKA_TIMEOUT_OPTIONS", "SendLimits", "current_limits"]

KAFKA_TIMEOUT_OPTIONS = ("message.timeout.ms", "delivery.timeout.ms", "request.timeout.ms",
                         "socket.timeout.ms", "socket.connection.setup.timeout.ms",
                         "transaction.timeout.ms")
"""librdkafka settings (milliseconds) that bound how long a message may wait: each capped at
the send deadline."""
KAFKA_LINGER_OPTIONS = ("linger.ms", "queue.buffering.max.ms")
"""librdkafka settings that hold messages back to batch them: capped at ``linger_ms``."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SendLimits:
    """The operator's caps on what a channel's options may make a send take."""

    timeout_s: float = 30.0
    """The longest one send (connect, send, whole answer) may take."""
    connect_attempts: int = 2
    """The most connection attempts one send may make (RabbitMQ ``connection_attempts``)."""
    retry_delay_s: float = 1.0
    """The longest pause between two connection attempts (RabbitMQ ``retry_delay``)."""
    linger_ms: int = 100
    """The longest a producer may hold messages to batch them (Kafka ``linger.ms``)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> SendLimits:
        """The limits ``settings`` set."""
        return cls(timeout_s=settings.send_timeout_max_seconds,
                   connect_attempts=settings.send_connect_attempts_max,
                   retry_delay_s=settings.send_retry_delay_max_seconds,
                   linger_ms=settings.send_linger_max_ms)

    def timeout(self, asked: float) -> float:
        """A channel's timeout, capped."""
        return min(asked, self.timeout_s)

    def kafka(self, producer: Mapping[str, Any]) -> dict[str, Any]:
        """librdkafka settings with every timeout and linger option capped (values the
        channel did not set are left to Tocsin's defaults, which lie within the caps)."""
        capped = dict(producer)
        cap_ms = int(self.timeout_s * 1000)
        for name in KAFKA_TIMEOUT_OPTIONS:  # 0 means "no limit" to librdkafka
            if name in capped:
                capped[name] = min(_number(capped[name]) or cap_ms, cap_ms)
        for name in KAFKA_LINGER_OPTIONS:
            if name in capped:
                capped[name] = min(_number(capped[name]), self.linger_ms)
        return capped

    def pika(self, params: Any) -> Any:
        """pika ``URLParameters`` with attempts, delays and timeouts capped, so connecting and
        publishing end within the deadline (pika's defaults are 15 s and more)."""
        params.connection_attempts = min(params.connection_attempts or 1, self.connect_attempts)
        params.retry_delay = min(params.retry_delay or 0, self.retry_delay_s)
        per_try = self.timeout_s / params.connection_attempts
        params.socket_timeout = min(params.socket_timeout or per_try, per_try)
        params.stack_timeout = min(params.stack_timeout or per_try, per_try)
        blocked = params.blocked_connection_timeout
        params.blocked_connection_timeout = min(blocked or self.timeout_s, self.timeout_s)
        return params


def _number(value: Any) -> int:
    """An option's value as a whole number; what is not one, or is negative, reads as 0."""
    try:
        return max(int(float(value)), 0)
    except (TypeError, ValueError, OverflowError):
        return 0


def current_limits() -> SendLimits:
    """This process's limits, from its settings as they are now (read when a channel is built)."""
    from tocsin.config import from_current_settings

    return from_current_settings(SendLimits.from_settings)

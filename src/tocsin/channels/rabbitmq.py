"""RabbitMQ channel (pika, publisher confirms, persistent messages).

Config: ``url`` (``amqp://user:pass@host:5672/vhost``, required), ``routing_key``
(required: the queue's name when publishing to the default exchange), ``exchange``
(default ``""``), ``declare_queue`` (default true: declare a durable queue named
``routing_key`` on the default exchange). The body is the JSON envelope; Tocsin's headers are
AMQP headers, the delivery id is the ``message_id``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["RabbitMQChannel", "RabbitMQConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class RabbitMQConfig:
    """A RabbitMQ channel's configuration."""

    url: str
    routing_key: str
    exchange: str = ""
    declare_queue: bool = True

    def check(self) -> None:
        """Reject what cannot work."""
        if not self.url.startswith(("amqp://", "amqps://")):
            raise ValidationError("config.url", f"{self.url!r} is not an amqp:// URL")
        if not self.routing_key:
            raise ValidationError("config.routing_key", "must not be empty")


def _pika() -> Any:
    try:
        import pika
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the rabbitmq channel needs pika: pip install 'tocsin[rabbitmq]'") \
            from exc
    return pika


class RabbitMQChannel(Channel):
    """Publishes each envelope with confirms; reconnects on the next batch after a failure."""

    def __init__(self, spec: ChannelSpec) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(RabbitMQConfig, spec.config)
        self._pika = _pika()
        self._conn: Any = None
        self._chan: Any = None
        self._lock = threading.Lock()

    def _channel(self) -> Any:
        if self._chan is None or self._chan.is_closed:
            self._conn = self._pika.BlockingConnection(self._pika.URLParameters(self.config.url))
            self._chan = self._conn.channel()
            self._chan.confirm_delivery()
            if self.config.declare_queue and not self.config.exchange:
                self._chan.queue_declare(queue=self.config.routing_key, durable=True)
        return self._chan

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        pika = self._pika
        results = []
        with self._lock:
            for env in envelopes:
                try:
                    self._channel().basic_publish(
                        exchange=self.config.exchange, routing_key=self.config.routing_key,
                        body=env.to_json_bytes(), mandatory=True,
                        properties=pika.BasicProperties(
                            content_type="application/json", delivery_mode=2,
                            message_id=env.delivery_id, headers=env.transport_headers()))
                    results.append(Result(delivery_id=env.delivery_id,
                                          outcome=Outcome.DELIVERED))
                except pika.exceptions.UnroutableError as exc:
                    results.append(Result(delivery_id=env.delivery_id, outcome=Outcome.REJECTED,
                                          error=f"rabbitmq: unroutable: {exc}"))
                except pika.exceptions.AMQPError as exc:
                    self._chan = None
                    results.append(Result(delivery_id=env.delivery_id, outcome=Outcome.RETRY,
                                          error=f"rabbitmq: {exc!r}"))
        return results

    def close(self) -> None:
        if self._conn is not None and self._conn.is_open:
            self._conn.close()

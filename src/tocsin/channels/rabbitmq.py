"""RabbitMQ channel (pika, publisher confirms, persistent messages).
``pip install 'tocsin[rabbitmq]'``.

Config: ``url`` (``amqp://user:pass@host:5672/vhost``, required; query options only those of
:data:`~tocsin.channels.options.RABBITMQ_URL_OPTIONS`; the password is shown as ``***``),
``routing_key`` (required:
the queue's name when publishing to the default exchange), ``exchange`` (default ``""``, the
default exchange), ``declare_queue`` (default true: declare a durable queue named
``routing_key`` when publishing to the default exchange), ``blocked_timeout`` seconds (default
30: how long a publish may wait while the broker blocks publishers, e.g. on a disk alarm).
The operator's :class:`~tocsin.channels.limits.SendLimits` cap the URL's
``connection_attempts``, ``retry_delay``, ``socket_timeout``, ``stack_timeout`` and the blocked
timeout, and bound the wait for each confirm, so a broker that accepts a connection and never
answers holds one send for at most ``send_timeout_max_seconds``.

The body is the delivery in its ``body`` format (:mod:`tocsin.channels.bodies`: by default
:meth:`~tocsin.domain.Envelope.to_json_bytes`, ``application/json``; delivery mode 2);
Tocsin's headers are AMQP headers and the delivery id is the ``message_id``. Each
message is published ``mandatory`` and waits for its confirm.

Outcomes: confirmed is DELIVERED; unroutable (no queue bound) is REJECTED; a nack, a lost
connection or a broker that cannot be reached is RETRY (once the connection is lost, the rest
of the batch is RETRY at once; the next batch reconnects).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tocsin.abc import Channel
from tocsin.channels import client_library
from tocsin.channels.bodies import Rendered, body_format, check_body, render
from tocsin.channels.limits import SendLimits, current_limits
from tocsin.channels.options import check_amqp_url
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["CONNECT_FAILED", "RabbitMQChannel", "RabbitMQConfig"]

CONNECT_FAILED = "rabbitmq: connect: failed (no broker answered, or it refused the connection)"
"""A failed connection's ``last_error``, whatever the cause: refused, reset, timed out, not
AMQP or not authenticated read alike, so a caller cannot tell an open port from a closed one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RabbitMQConfig:
    """A RabbitMQ channel's configuration."""

    url: str
    """``amqp://`` or ``amqps://`` URL of the broker and vhost."""
    routing_key: str
    """The routing key; the queue's name on the default exchange."""
    exchange: str = ""
    """The exchange to publish to; ``""`` is the default exchange."""
    declare_queue: bool = True
    """Declare a durable queue named ``routing_key`` (default exchange only)."""
    blocked_timeout: float = 30.0
    """Seconds a publish may wait while the broker blocks publishers."""

    body: str = "envelope"
    """The body's format (:class:`~tocsin.domain.terms.BodyFormat`); a schedule's wins."""

    def check(self) -> None:
        """Reject what cannot work."""
        if not self.url.startswith(("amqp://", "amqps://")):
            raise ValidationError("config.url", f"{self.url!r} is not an amqp:// URL")
        if not self.routing_key:
            raise ValidationError("config.routing_key", "must not be empty")
        if self.blocked_timeout <= 0:
            raise ValidationError("config.blocked_timeout", "must be positive")
        check_body(self.body)

    def admit(self, policy: DestinationPolicy) -> None:
        """Refuse URL options outside the allow-list (stored as given otherwise)."""
        check_amqp_url(self.url, policy)


class RabbitMQChannel(Channel):
    """Publishes each envelope with confirms; reconnects on the next batch after a failure."""

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(RabbitMQConfig, spec.config)
        self.config.admit(policy or current_policy())  # again: registered under another policy
        self._limits = limits or current_limits()
        self._pika = client_library(ChannelKind.RABBITMQ)
        self._conn: Any = None
        self._chan: Any = None
        self._lock = threading.Lock()

    def _connect(self) -> Any:
        """The open channel, after checking the connection is alive (heartbeats are only
        answered while pika runs, so an idle connection may have been dropped)."""
        if self._chan is not None and self._chan.is_open:
            try:
                self._conn.process_data_events(time_limit=0)
                return self._chan
            except self._pika.exceptions.AMQPError:
                self._drop()
        pika = self._pika
        params = pika.URLParameters(self.config.url)
        if params.blocked_connection_timeout is None:
            params.blocked_connection_timeout = self.config.blocked_timeout
        self._conn = pika.BlockingConnection(self._limits.pika(params))
        self._chan = self._conn.channel()
        self._chan.confirm_delivery()
        if self.config.declare_queue and not self.config.exchange:
            self._chan.queue_declare(queue=self.config.routing_key, durable=True)
        return self._chan

    def _drop(self) -> None:
        conn, self._conn, self._chan = self._conn, None, None
        if conn is not None and conn.is_open:
            with contextlib.suppress(Exception):  # already broken: nothing to release
                conn.close()

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        errors = self._pika.exceptions
        results: list[Result] = []
        with self._lock:
            try:
                chan = self._connect()
            except Exception:  # pika's handshake timeouts are no AMQPError
                self._drop()
                return [Result(e.delivery_id, Outcome.RETRY, CONNECT_FAILED) for e in envelopes]
            for i, env in enumerate(envelopes):
                try:
                    out = render(env, body_format(env, self.config.body), "rabbitmq")
                    chan.basic_publish(
                        exchange=self.config.exchange, routing_key=self.config.routing_key,
                        body=out.body, mandatory=True, properties=self._properties(env, out))
                    results.append(Result(env.delivery_id, Outcome.DELIVERED))
                except errors.UnroutableError as exc:
                    results.append(Result(env.delivery_id, Outcome.REJECTED,
                                          f"rabbitmq: unroutable: {exc!r}"))
                except errors.NackError as exc:
                    results.append(Result(env.delivery_id, Outcome.RETRY,
                                          f"rabbitmq: nacked: {exc!r}"))
                except errors.AMQPError as exc:
                    self._drop()
                    error = f"rabbitmq: {exc!r}"
                    results.extend(Result(e.delivery_id, Outcome.RETRY, error)
                                   for e in envelopes[i:])
                    break
        return results

    def _properties(self, env: Envelope, out: Rendered) -> Any:
        return self._pika.BasicProperties(
            content_type=out.content_type, delivery_mode=2, message_id=env.delivery_id,
            headers=out.headers)

    def close(self) -> None:
        with self._lock:
            self._drop()

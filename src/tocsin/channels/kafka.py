"""Kafka channel (confluent-kafka; any Kafka-protocol broker). ``pip install 'tocsin[kafka]'``.

Config: ``bootstrap_servers`` and ``topic`` (required), ``producer`` (extra librdkafka
settings, applied last; only those of :data:`~tocsin.channels.options.KAFKA_OPTIONS`, TLS files
only under ``credential_roots``), ``flush_timeout`` seconds (default 30: how long a batch may
wait for the broker's acknowledgements; also librdkafka's ``message.timeout.ms`` unless
``producer`` sets it). The operator's :class:`~tocsin.channels.limits.SendLimits` cap
``flush_timeout``, every producer timeout and ``linger.ms``, so one send ends within
``send_timeout_max_seconds``. The producer is idempotent with ``acks=all``, ``linger.ms=5`` and
``partitioner=murmur2_random``, so keys land on the partitions Java clients and Spark pick;
librdkafka logs to the ``tocsin.channels.kafka`` logger.

Each message's key is the schedule's ordering key, else its key, else its id; the value and the
headers are the delivery in its ``body`` format (:mod:`tocsin.channels.bodies`: by default
:meth:`~tocsin.domain.Envelope.to_json_bytes` and
:meth:`~tocsin.domain.Envelope.transport_headers`), UTF-8, with ``content-type``.

Outcomes: an acknowledged message is DELIVERED; one the broker can never take (too large, an
invalid record) is REJECTED; anything else (timeouts, a broker down, an unknown topic, a
fatal producer error, after which the producer is rebuilt) is RETRY. Messages still queued
when ``flush_timeout`` ends are purged, so they cannot be sent after their RETRY is answered.
A RETRY's error ends with the last broker error librdkafka reported since a message was last
acknowledged (a refused TLS certificate, a failed SASL login, a refused connection), so a
message that timed out says why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tocsin.abc import Channel
from tocsin.channels import client_library
from tocsin.channels.addresses import check_broker
from tocsin.channels.bodies import body_format, check_body, render
from tocsin.channels.limits import SendLimits, current_limits
from tocsin.channels.options import check_kafka_producer, check_seconds
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, Result
from tocsin.domain.terms import BodyFormat
from tocsin.errors import ValidationError

__all__ = ["KafkaChannel", "KafkaConfig"]

_LOG = logging.getLogger(__name__)
"""librdkafka's own log lines, instead of its default: raw lines on stderr."""


@dataclass(frozen=True, kw_only=True, slots=True)
class KafkaConfig:
    """A Kafka channel's configuration."""

    bootstrap_servers: str
    """``host:port[,host:port...]``."""
    topic: str
    """Where every message goes."""
    producer: dict[str, Any] = field(default_factory=dict)
    """Extra librdkafka producer settings, over Tocsin's."""
    flush_timeout: float = 30.0
    """Seconds a batch waits for acknowledgements before the rest are RETRY."""
    body: str = "envelope"
    """The body's format (:class:`~tocsin.domain.terms.BodyFormat`); a schedule's wins."""

    def check(self) -> None:
        """Reject what cannot work."""
        if not self.bootstrap_servers.strip():
            raise ValidationError("config.bootstrap_servers", "must not be empty")
        if not self.topic.strip():
            raise ValidationError("config.topic", "must not be empty")
        check_seconds(self.flush_timeout, "config.flush_timeout")
        check_body(self.body)
        bad = sorted(k for k in self.producer if not isinstance(k, str) or not k)
        if bad or "bootstrap.servers" in self.producer:
            raise ValidationError("config.producer",
                                  "takes librdkafka settings by name, except bootstrap.servers")

    def admit(self, policy: DestinationPolicy) -> None:
        """Refuse brokers the policy refuses and producer options outside the allow-list
        (stored as given otherwise)."""
        check_broker(self.bootstrap_servers, policy, field="config.bootstrap_servers")
        check_kafka_producer(self.producer, policy)


class KafkaChannel(Channel):
    """Produces each envelope and waits for the broker's acknowledgement of the batch."""

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(KafkaConfig, spec.config)
        self.config.admit(policy or current_policy())  # again: registered under another policy
        limits = limits or current_limits()
        self.timeout_s = limits.timeout(self.config.flush_timeout)
        self._kafka = client_library(ChannelKind.KAFKA)
        err = self._kafka.KafkaError
        self._rejected = frozenset({
            err.MSG_SIZE_TOO_LARGE, err.INVALID_MSG_SIZE, err.INVALID_MSG, err.INVALID_RECORD,
            err._INVALID_ARG})
        timeout_ms = int(self.timeout_s * 1000)
        self._settings = {
            "bootstrap.servers": self.config.bootstrap_servers,
            "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
            "linger.ms": 5, "message.timeout.ms": timeout_ms,
            "socket.connection.setup.timeout.ms": timeout_ms,
            "logger": _LOG, "error_cb": self._on_error, **limits.kafka(self.config.producer),
        }
        self._producer: Any = self._kafka.Producer(self._settings)
        self._lock = threading.Lock()
        self._producer_broken = False
        self._broker_error: str | None = None

    def _on_error(self, err: Any) -> None:
        """librdkafka's errors outside any one message (called from ``poll``/``flush``, so
        under the send's lock). A fatal one (a broker restarted without the idempotent
        producer's state: UNKNOWN_PRODUCER_ID) breaks the producer, which the send then
        rebuilds; without this callback confluent-kafka raises it from ``flush``, out of the
        send, and the broken producer was kept for good. Any other is kept, as the reason
        of the RETRYs that follow: the messages themselves only time out (a TLS certificate
        the client refused showed as ``Local: Message timed out``); "all brokers are down"
        does not hide the error that took them down."""
        if err.fatal():
            self._producer_broken = True
        elif self._broker_error is None or err.code() != self._kafka.KafkaError._ALL_BROKERS_DOWN:
            self._broker_error = err.str()

    def _retry(self, delivery_id: str, error: str) -> Result:
        """A RETRY whose ``error`` ends with the last broker error, if any."""
        if self._broker_error:
            error = f"{error} (last broker error: {self._broker_error})"
        return Result(delivery_id, Outcome.RETRY, error)

    def _outcome(self, err: Any) -> Outcome:
        if err.fatal() or err.code() == self._kafka.KafkaError._FATAL:
            self._producer_broken = True
        return Outcome.REJECTED if err.code() in self._rejected else Outcome.RETRY

    def _reporter(self, results: dict[str, Result], delivery_id: str) -> Callable[[Any, Any], None]:
        def report(err: Any, _msg: Any) -> None:
            if err is None:
                results[delivery_id] = Result(delivery_id, Outcome.DELIVERED)
                self._broker_error = None  # the broker is reached: older errors are over
            else:
                results[delivery_id] = self._failed(delivery_id, err)
        return report

    def _failed(self, delivery_id: str, err: Any) -> Result:
        outcome = self._outcome(err)
        if outcome is Outcome.RETRY:
            return self._retry(delivery_id, f"kafka: {err.str()}")
        return Result(delivery_id, outcome, f"kafka: {err.str()}")

    def _produce(self, env: Envelope, results: dict[str, Result], deadline: float) -> None:
        key = env.ordering_key or env.key or env.schedule_id
        fmt = body_format(env, self.config.body)
        out = render(env, fmt, "kafka")
        headers = list(out.headers.items())
        if fmt is not BodyFormat.ENVELOPE:  # the envelope's messages are as they always were
            headers.append(("content-type", out.content_type))
        while True:
            try:
                self._producer.produce(
                    self.config.topic, value=out.body, key=key.encode(), headers=headers,
                    on_delivery=self._reporter(results, env.delivery_id))
                return
            except BufferError:  # the local queue is full: wait for acknowledgements
                if time.monotonic() > deadline:
                    results[env.delivery_id] = self._retry(env.delivery_id,
                                                           "kafka: local queue full")
                    return
                self._producer.poll(0.1)
            except self._kafka.KafkaException as exc:
                results[env.delivery_id] = self._failed(env.delivery_id, exc.args[0])
                return

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        results: dict[str, Result] = {}
        timeout = self.timeout_s
        with self._lock:
            if self._producer is None:  # closed, and used again
                self._producer = self._kafka.Producer(self._settings)
            self._producer_broken = False
            deadline = time.monotonic() + timeout
            for env in envelopes:
                self._produce(env, results, deadline)
            try:
                # a small margin past message.timeout.ms, for the timed-out reports to arrive
                if self._producer.flush(max(deadline - time.monotonic(), 0) + 0.5):
                    self._producer.purge(in_queue=True, in_flight=False)
                    self._producer.poll(0)
            except (self._kafka.KafkaException, SystemError) as exc:
                # a fatal error is raised out of flush, from inside a delivery report (as a
                # SystemError whose cause is the KafkaException): the messages it did not
                # report are RETRY, and the producer is made anew
                _LOG.warning("kafka channel %s: producer failed: %s", self.spec.name,
                             exc.__cause__ or exc)
                self._producer_broken = True
            if self._producer_broken:
                self._producer = self._kafka.Producer(self._settings)
            return [results.get(env.delivery_id) or self._retry(
                env.delivery_id, f"kafka: not acknowledged within {timeout} s")
                for env in envelopes]

    def close(self) -> None:
        """Flush, then let the producer go (its librdkafka threads end with it); a send after
        this makes a new one."""
        with self._lock:
            producer, self._producer = self._producer, None
            if producer is not None:
                producer.flush(self.timeout_s)

"""Kafka channel (confluent-kafka; any Kafka-protocol broker).

Config: ``bootstrap_servers``, ``topic`` (required), ``producer`` (extra librdkafka settings),
``flush_timeout`` seconds (default 30). The producer is idempotent with ``acks=all`` and
``partitioner=murmur2_random``, so keys land on the partitions Java clients and Spark pick.
The message key is the schedule's ordering key, else its key, else its id; the value is the
JSON envelope; Tocsin's headers travel as Kafka headers.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["KafkaChannel", "KafkaConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class KafkaConfig:
    """A Kafka channel's configuration."""

    bootstrap_servers: str
    topic: str
    producer: dict[str, Any] = field(default_factory=dict)
    flush_timeout: float = 30.0

    def check(self) -> None:
        """Reject what cannot work."""
        if not self.topic.strip():
            raise ValidationError("config.topic", "must not be empty")
        if not self.bootstrap_servers.strip():
            raise ValidationError("config.bootstrap_servers", "must not be empty")


def _producer_module() -> Any:
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError("the kafka channel needs confluent-kafka: "
                          "pip install 'tocsin[kafka]'") from exc
    return confluent_kafka


class KafkaChannel(Channel):
    """Produces each envelope and waits for the broker's acknowledgement of the batch."""

    def __init__(self, spec: ChannelSpec) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(KafkaConfig, spec.config)
        kafka = _producer_module()
        self._kafka = kafka
        self._producer = kafka.Producer({
            "bootstrap.servers": self.config.bootstrap_servers,
            "enable.idempotence": True, "acks": "all", "partitioner": "murmur2_random",
            "linger.ms": 5, "compression.type": "none", **self.config.producer,
        })
        self._lock = threading.Lock()

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        results: dict[str, Result] = {}

        def report(delivery_id: str) -> Any:
            def done(err: Any, _msg: Any) -> None:
                if err is None:
                    results[delivery_id] = Result(delivery_id=delivery_id,
                                                  outcome=Outcome.DELIVERED)
                else:
                    outcome = Outcome.RETRY if err.retriable() or not err.fatal() else \
                        Outcome.REJECTED
                    results[delivery_id] = Result(delivery_id=delivery_id, outcome=outcome,
                                                  error=f"kafka: {err.str()}")
            return done

        with self._lock:
            for env in envelopes:
                key = env.ordering_key or env.key or env.schedule_id
                headers = list(env.transport_headers().items())
                while True:
                    try:
                        self._producer.produce(self.config.topic, value=env.to_json_bytes(),
                                               key=key.encode(), headers=headers,
                                               on_delivery=report(env.delivery_id))
                        break
                    except BufferError:
                        self._producer.poll(0.1)
                    except self._kafka.KafkaException as exc:
                        results[env.delivery_id] = Result(
                            delivery_id=env.delivery_id, outcome=Outcome.RETRY,
                            error=f"kafka: {exc}")
                        break
            self._producer.flush(self.config.flush_timeout)
        return [results.get(env.delivery_id) or Result(
            delivery_id=env.delivery_id, outcome=Outcome.RETRY,
            error=f"kafka: not acknowledged within {self.config.flush_timeout} s")
            for env in envelopes]

    def close(self) -> None:
        self._producer.flush(self.config.flush_timeout)

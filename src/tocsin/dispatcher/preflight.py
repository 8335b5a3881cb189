"""What the dispatcher checks before it starts Spark: that this machine can deliver to every
registered channel. A Kafka or RabbitMQ channel on a machine without confluent-kafka or pika
would otherwise register fine and fail each of its schedules at delivery, one retry after
another, into the dead letters."""

from __future__ import annotations

from tocsin.abc import Store
from tocsin.channels import missing_library

__all__ = ["undeliverable_channels"]


def undeliverable_channels(store: Store) -> list[str]:
    """One line for each registered channel (of any tenant) this machine cannot deliver to,
    naming the channel and what to install; empty when it can deliver to all."""
    return [f"channel {spec.tenant}/{spec.name}: {lacking}" for spec in store.list_channels()
            if (lacking := missing_library(spec.kind)) is not None]

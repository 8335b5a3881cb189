"""``tocsin ingest``: the Kafka commands topic into the store, as a Spark Structured Streaming
query.

``tocsin-kafka`` (:mod:`~tocsin.pipelines.kafka_source`) reads the topic, one Spark partition
per topic partition; the ``tocsin-commands`` sink applies each partition's commands in order on
an executor (:class:`~tocsin.pipelines.commands.CommandApplier`), sends bad commands to the
rejects topic with the reason and, when configured, every answer to the reply topic; both are
flushed before the task ends, so before the batch's offsets are committed. A crash replays the
batch from the checkpoint: the store ends the same (commands are idempotent), the rejects and
replies of that batch may be sent twice.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from tocsin.channels.options import kafka_client_settings
from tocsin.clock import SystemClock
from tocsin.config import CheckpointQuery, Settings
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.pipelines.kafka_source import KafkaDataSource
from tocsin.spark.worker import store_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

__all__ = ["INGEST_NAME", "CommandsDataSource", "run_ingest", "start_ingest"]

INGEST_NAME = "tocsin-ingest"
log = logging.getLogger("tocsin.ingest")
_APPLY_CHUNK = 10_000


@dataclass(frozen=True, kw_only=True, slots=True)
class IngestOptions:
    """What the sink needs on the executors, as Spark's string options."""

    settings: str
    """The settings as JSON (the validation limits, the store)."""
    buckets: int
    bootstrap: str
    rejects_topic: str
    reply_topic: str

    @classmethod
    def of(cls, settings: Settings) -> IngestOptions:
        """The options for ``settings``."""
        return cls(settings=json.dumps(settings.model_dump(mode="json")),
                   buckets=settings.buckets, bootstrap=settings.ingest_bootstrap,
                   rejects_topic=settings.ingest_rejects_topic
                   or f"{settings.ingest_topic}.rejects",
                   reply_topic=settings.ingest_reply_topic)

    def to_spark(self) -> dict[str, str]:
        """As Spark options."""
        return {"settings": self.settings, "buckets": str(self.buckets),
                "bootstrap": self.bootstrap, "rejects_topic": self.rejects_topic,
                "reply_topic": self.reply_topic}

    @classmethod
    def from_spark(cls, options: dict[str, str]) -> IngestOptions:
        """From Spark's (case-insensitive) options."""
        o = {k.lower(): v for k, v in options.items()}
        return cls(settings=o["settings"], buckets=int(o["buckets"]), bootstrap=o["bootstrap"],
                   rejects_topic=o["rejects_topic"], reply_topic=o.get("reply_topic", ""))


@dataclass
class IngestTally(WriterCommitMessage):
    """One task's counts, sent to the driver."""

    applied: int = 0
    refused: int = 0
    invalid: int = 0


_producers: dict[tuple[str, str], Any] = {}
_lock = threading.Lock()


def _producer(bootstrap: str, client: dict[str, str]) -> Any:
    """This process's producer for ``bootstrap`` with the ``client`` settings (TLS, SASL)."""
    from confluent_kafka import Producer

    at = (bootstrap, json.dumps(client, sort_keys=True))
    with _lock:
        if at not in _producers:
            _producers[at] = Producer({**client, "bootstrap.servers": bootstrap,
                                       "linger.ms": 20, "partitioner": "murmur2_random"})
        return _producers[at]


class CommandStreamWriter(DataSourceStreamArrowWriter):
    """Applies the commands of each partition, in order; answers to Kafka."""

    def __init__(self, options: IngestOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[pa.RecordBatch]) -> IngestTally:
        opts = self.options
        settings = Settings(**json.loads(opts.settings))
        applier = CommandApplier(store_for(settings.store_url, opts.buckets), settings)
        producer = _producer(opts.bootstrap, kafka_client_settings(settings.ingest_kafka))
        clock, tally = SystemClock(), IngestTally()
        for batch in iterator:
            now = clock.now_ms()
            messages = [Message(t, p, o, s if s and s > 0 else now, v) for t, p, o, s, v in
                        zip(*(c.to_pylist() for c in batch.columns), strict=True)]
            for start in range(0, len(messages), _APPLY_CHUNK):
                for answer in applier.apply(messages[start:start + _APPLY_CHUNK]):
                    key = f"{answer.message.partition}:{answer.message.offset}".encode()
                    if answer.outcome is Outcome.INVALID:
                        tally.invalid += 1
                        producer.produce(opts.rejects_topic, answer.to_json(), key)
                    elif answer.outcome is Outcome.REFUSED:
                        tally.refused += 1
                    else:
                        tally.applied += 1
                    if opts.reply_topic:
                        producer.produce(opts.reply_topic, answer.to_json(), key)
                    producer.poll(0)
        if producer.flush(60) > 0:
            raise RuntimeError("kafka: rejects or replies not delivered within 60 s")
        return tally

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        tallies = [m for m in messages if isinstance(m, IngestTally)]
        log.info("ingest batch %d: %d applied, %d refused, %d invalid", batchId,
                 sum(t.applied for t in tallies), sum(t.refused for t in tallies),
                 sum(t.invalid for t in tallies))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class CommandsDataSource(DataSource):
    """``writeStream.format("tocsin-commands")``: apply commands to the store."""

    @classmethod
    def name(cls) -> str:
        return "tocsin-commands"

    def schema(self) -> str:
        from tocsin.pipelines.kafka_source import SPARK_SCHEMA

        return SPARK_SCHEMA

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        return CommandStreamWriter(IngestOptions.from_spark(dict(self.options)))


def start_ingest(spark: SparkSession, settings: Settings, *,
                 checkpoint: str | Path | None = None,
                 trigger_seconds: float | None = None) -> StreamingQuery:
    """Start the ingest query over ``settings.ingest_topic`` (checkpoint default: the
    ``ingest`` folder under the ``checkpoint`` setting)."""
    from tocsin.spark.session import register_python_sources

    register_python_sources(spark, KafkaDataSource, CommandsDataSource)
    options = IngestOptions.of(settings)
    client = kafka_client_settings(settings.ingest_kafka)  # refused here, before Spark reads
    return (
        spark.readStream.format("tocsin-kafka")
        .option("bootstrap", settings.ingest_bootstrap).option("topic", settings.ingest_topic)
        .option("client", json.dumps(client))
        .option("maxPerBatch", str(settings.ingest_max_per_batch)).load()
        .writeStream.format("tocsin-commands").options(**options.to_spark())
        .option("checkpointLocation",
                str(checkpoint or settings.checkpoint_for(CheckpointQuery.INGEST)))
        .trigger(processingTime=f"{trigger_seconds or settings.trigger_seconds} seconds")
        .queryName(INGEST_NAME)
        .start()
    )


def run_ingest(settings: Settings) -> None:
    """Run the ingest query in this process until it stops (``tocsin ingest``)."""
    from tocsin.spark.checkpoints import adopt_legacy_checkpoints
    from tocsin.spark.session import session_for
    from tocsin.stores import open_store

    open_store(settings.store_url, buckets=settings.buckets).close()  # create and migrate
    adopt_legacy_checkpoints(settings)
    spark = session_for(settings, app_name=INGEST_NAME)
    query = start_ingest(spark, settings)
    try:
        query.awaitTermination()
    finally:
        query.stop()
        spark.stop()

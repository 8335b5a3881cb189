"""A Kafka topic as a Spark streaming source: a Python Data Source over confluent-kafka.

No Kafka connector jar is needed. Offsets are ``{"<partition>": next offset, ...}`` and live in
the query's checkpoint, not in a consumer group: the driver reads each partition's watermarks
(``latestOffset``), and each Spark partition is one topic partition's offset range, read on an
executor by a consumer ``assign()``-ed to exactly that range (no group coordination, no
rebalancing; a replayed batch reads the same range again). Options:

``bootstrap``      the brokers, ``host:port[,...]``
``client``         more librdkafka settings (TLS, SASL), a JSON object (default ``{}``)
``topic``          the topic
``maxPerBatch``    most records per micro-batch over all partitions (default 100 000)
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows
from pyspark.sql.types import StructType

__all__ = ["ARROW_SCHEMA", "BrokerErrors", "KafkaDataSource", "KafkaStreamReader"]

SPARK_SCHEMA = "topic string, partition int, offset bigint, timestamp bigint, value binary"
ARROW_SCHEMA = pa.schema([("topic", pa.string()), ("partition", pa.int32()),
                          ("offset", pa.int64()), ("timestamp", pa.int64()),
                          ("value", pa.binary())])
_CHUNK = 10_000
_METADATA_S = 30.0
"""How long the driver waits for the topic's metadata before the query fails (saying why)."""
_STALL_S = 120.0
"""A range that yields nothing this long (its records are below the high watermark the driver
saw) fails the task rather than hang the query."""


class BrokerErrors:
    """librdkafka's ``error_cb``: keeps the last error reported outside any request (a
    certificate the client refused, a failed SASL login, a refused connection), which a
    failed request does not name (``Failed to get metadata: Local: Broker transport
    failure``). "All brokers are down" does not hide the error that took them down."""

    def __init__(self) -> None:
        self.last: str | None = None

    def __call__(self, err: Any) -> None:
        from confluent_kafka import KafkaError

        if self.last is None or err.code() != KafkaError._ALL_BROKERS_DOWN:
            self.last = err.str()


def _consumer(bootstrap: str, *, probe: bool = False, client: dict[str, str] | None = None,
              errors: BrokerErrors | None = None) -> Any:
    """A consumer that is only ever ``assign()``-ed; a ``probe`` fetches as little as it can
    (it is read for the watermarks of its fetch responses). ``client``: TLS and SASL
    settings (:data:`~tocsin.channels.options.KAFKA_CLIENT_OPTIONS`); ``errors``: where its
    errors go."""
    from confluent_kafka import Consumer

    tuning = ({"max.partition.fetch.bytes": 1, "queued.max.messages.kbytes": 1,
               "fetch.wait.max.ms": 10} if probe else {"fetch.max.bytes": 64 * 1024 * 1024})
    return Consumer({**(client or {}), "bootstrap.servers": bootstrap,
                     "group.id": "tocsin-ingest", "enable.auto.commit": False,
                     "auto.offset.reset": "earliest", **tuning,
                     **({"error_cb": errors} if errors is not None else {})})


@dataclass(frozen=True)
class OffsetRange(InputPartition):
    """Records ``[start, end)`` of one topic partition."""

    partition: int
    start: int
    end: int


class KafkaStreamReader(DataSourceStreamReader):
    """Watermarks and ranges on the driver; records on the executors."""

    def __init__(self, options: dict[str, str]) -> None:
        lowered = {k.lower(): v for k, v in options.items()}
        self.bootstrap = lowered["bootstrap"]
        self.client: dict[str, str] = json.loads(lowered.get("client") or "{}")
        self.topic = lowered["topic"]
        self.max_per_batch = int(lowered.get("maxperbatch", 100_000))
        self._meta: Any = None
        self._errors = BrokerErrors()

    def _watermarks(self, start: dict[str, int] | None = None) -> dict[int, tuple[int, int]]:
        """Each partition's (low, high) watermarks, as the broker says now."""
        from confluent_kafka import KafkaException, TopicPartition

        if self._meta is None:
            self._meta = _consumer(self.bootstrap, probe=True, client=self.client,
                                   errors=self._errors)
        try:
            topic = self._meta.list_topics(self.topic, timeout=_METADATA_S).topics[self.topic]
        except KafkaException as exc:
            self._meta.poll(0)  # hands the errors reported meanwhile to self._errors
            why = f" (last broker error: {self._errors.last})" if self._errors.last else ""
            raise RuntimeError(f"kafka {self.bootstrap}: {exc.args[0].str()}{why}") from exc
        if topic.error is not None:
            raise RuntimeError(f"kafka topic {self.topic!r}: {topic.error}")
        marks = {p: self._meta.get_watermark_offsets(TopicPartition(self.topic, p), timeout=30,
                                                     cached=False)
                 for p in sorted(topic.partitions)}
        # Some brokers (tansu 0.6) answer ListOffsets with the last record batch's base offset:
        # the high watermark of a fetch response is exact, so fetch a little from each
        # partition's position and take the larger.
        self._meta.assign([TopicPartition(self.topic, p, max(int((start or {}).get(str(p), lo)),
                                                             lo))
                           for p, (lo, _) in marks.items()])
        fetched: dict[int, int] = {}
        deadline = time.monotonic() + 2.0
        while len(fetched) < len(marks) and time.monotonic() < deadline:
            self._meta.consume(num_messages=100, timeout=0.1)
            for p in marks:
                high = self._meta.get_watermark_offsets(TopicPartition(self.topic, p),
                                                        cached=True)[1]
                if high >= 0:
                    fetched[p] = high
        return {p: (lo, max(hi, fetched.get(p, hi))) for p, (lo, hi) in marks.items()}

    def initialOffset(self) -> dict[str, int]:
        return {str(p): low for p, (low, _) in self._watermarks().items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.max_per_batch)

    def latestOffset(self, start: dict[str, int], limit: ReadLimit) -> dict[str, int]:
        marks = self._watermarks(start)
        current = {p: max(int(start.get(str(p), low)), low) for p, (low, _) in marks.items()}
        budget = (None if isinstance(limit, ReadAllAvailable) or not isinstance(limit, ReadMaxRows)
                  else limit.max_rows)
        end = {p: high for p, (_, high) in marks.items()}
        if budget is not None:
            # Round robin: every partition with records gets a fair share of the budget.
            end = dict(current)
            waiting = [p for p in marks if marks[p][1] > current[p]]
            while budget > 0 and waiting:
                share = max(1, budget // len(waiting))
                for p in list(waiting):
                    take = min(share, marks[p][1] - end[p], budget)
                    end[p] += take
                    budget -= take
                    if end[p] >= marks[p][1]:
                        waiting.remove(p)
        return {str(p): e for p, e in end.items()}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[OffsetRange]:
        return [OffsetRange(int(p), int(start.get(p, e)), e) for p, e in end.items()
                if e > int(start.get(p, e))]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, OffsetRange)
        yield from read_range(self.bootstrap, self.topic, partition, client=self.client)

    def commit(self, end: dict[str, int]) -> None:
        pass

    def stop(self) -> None:
        if self._meta is not None:
            self._meta.close()
            self._meta = None


def read_range(bootstrap: str, topic: str, part: OffsetRange, *,
               client: dict[str, str] | None = None) -> Iterator[pa.RecordBatch]:
    """The records of ``part`` as record batches of :data:`ARROW_SCHEMA`."""
    from confluent_kafka import TopicPartition

    consumer = _consumer(bootstrap, client=client)
    consumer.assign([TopicPartition(topic, part.partition, part.start)])
    position, last_progress = part.start, time.monotonic()
    try:
        while position < part.end:
            rows: list[tuple[str, int, int, int, bytes | None]] = []
            for msg in consumer.consume(num_messages=min(_CHUNK, part.end - position),
                                        timeout=1.0):
                if msg.error() is not None:
                    continue  # end of partition and other informational events
                offset = msg.offset()
                if offset >= part.end:
                    position = part.end
                    break
                kind, stamp = msg.timestamp()
                rows.append((topic, part.partition, offset, stamp if kind else 0, msg.value()))
                position = offset + 1
            if rows:
                last_progress = time.monotonic()
                columns = list(zip(*rows, strict=True))
                yield pa.RecordBatch.from_arrays(
                    [pa.array(c, type=f.type) for c, f in zip(columns, ARROW_SCHEMA,
                                                               strict=True)],
                    schema=ARROW_SCHEMA)
            elif time.monotonic() - last_progress > _STALL_S:
                raise RuntimeError(f"kafka {topic}[{part.partition}]: no record at offset "
                                   f"{position} (range ends at {part.end}) for {_STALL_S:.0f} s")
    finally:
        consumer.close()


class KafkaDataSource(DataSource):
    """``spark.readStream.format("tocsin-kafka")``: a topic's records."""

    @classmethod
    def name(cls) -> str:
        return "tocsin-kafka"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KafkaStreamReader(dict(self.options))

"""The dispatcher's source: a Python Data Source stream reader over the store.

Offsets are ``{"until": ms, "epoch": n}``. On the driver, :meth:`DueStreamReader.latestOffset`
asks the store whether anything is claimable; when nothing is, it returns the previous offset
and Spark runs no batch. Otherwise it takes a new epoch from the store (the fencing token) and
``until = now``. Each partition is a bucket range; on the executors :meth:`read` claims, for the
batch's epoch, the due rows of its range (``due <= until``, no lower bound) up to its share of
the batch cap. Spark replays a failed batch with the same offsets: the store then returns the
rows that epoch already claimed and claims nothing new.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from tocsin.abc import ClaimedRow
from tocsin.dispatcher.beat import SOURCE
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runtime import log, retrying, store_for
from tocsin.errors import StoreError

__all__ = ["ARROW_SCHEMA", "DueStreamReader", "TocsinDataSource", "bucket_ranges"]

SPARK_SCHEMA = (
    "id string, tenant string, channel string, payload binary, payload_kind string, "
    "headers string, due_ms bigint, attempt int, key string, ordering_key string, epoch bigint, "
    "chain_base int"
)
ARROW_SCHEMA = pa.schema([
    ("id", pa.string()), ("tenant", pa.string()), ("channel", pa.string()),
    ("payload", pa.binary()), ("payload_kind", pa.string()), ("headers", pa.string()),
    ("due_ms", pa.int64()), ("attempt", pa.int32()), ("key", pa.string()),
    ("ordering_key", pa.string()), ("epoch", pa.int64()), ("chain_base", pa.int32()),
])
ARROW_CHUNK = 10_000
CLAIM_MARKER_KEEP_MS = 24 * 3600 * 1000
"""Replay markers are kept a day: far longer than any replay or lease."""
CLAIM_MARKER_PRUNE_S = 300.0


@dataclass(frozen=True)
class BucketRange(InputPartition):
    """One Spark task's share of a batch: buckets ``[lo, hi]`` of ``epoch``."""

    epoch: int
    lo: int
    hi: int
    until_ms: int
    limit: int


def bucket_ranges(buckets: int, parts: int) -> list[tuple[int, int]]:
    """Split ``buckets`` into at most ``parts`` contiguous, nearly equal, inclusive ranges."""
    parts = max(1, min(parts, buckets))
    edges = [round(i * buckets / parts) for i in range(parts + 1)]
    return [(edges[i], edges[i + 1] - 1) for i in range(parts)]


def to_arrow(rows: Sequence[ClaimedRow]) -> pa.RecordBatch:
    """Claimed rows as one record batch of :data:`ARROW_SCHEMA` (every column typed)."""
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(ARROW_SCHEMA)
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, ARROW_SCHEMA, strict=True)],
        schema=ARROW_SCHEMA)


class DueStreamReader(DataSourceStreamReader):
    """Offsets and partitions on the driver; claims on the executors."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options
        self._last_beat = 0.0
        self._last_prune = 0.0

    def initialOffset(self) -> dict[str, int]:
        return {"until": 0, "epoch": 0}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        opts = self.options
        store = store_for(opts.store_url, opts.buckets)
        now = time.time_ns() // 1_000_000
        try:
            if time.monotonic() - self._last_beat > opts.idle_beat_s:
                store.beat(SOURCE, now_ms=now)
                self._last_beat = time.monotonic()
            due = store.next_due_ms(now_ms=now, lease_ms=opts.lease_ms)
            if due is None or due > now:
                return start
            return {"until": now, "epoch": store.next_epoch()}
        except StoreError as exc:  # the store is down: no batch now, ask again next trigger
            log.warning("dispatcher: store unavailable, no batch: %s", exc)
            return start

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[BucketRange]:
        if start == end:
            return []
        opts = self.options
        buckets = store_for(opts.store_url, opts.buckets).buckets  # fixed by the store
        ranges = bucket_ranges(buckets, opts.partitions)
        limit = math.ceil(opts.batch_cap / len(ranges))
        return [BucketRange(end["epoch"], lo, hi, end["until"], limit) for lo, hi in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketRange)
        opts = self.options
        store = store_for(opts.store_url, opts.buckets)
        rows = retrying(lambda: store.claim(
            epoch=partition.epoch, bucket_lo=partition.lo, bucket_hi=partition.hi,
            until_ms=partition.until_ms, now_ms=time.time_ns() // 1_000_000,
            lease_ms=opts.lease_ms, limit=partition.limit), what="claim")
        for i in range(0, len(rows), ARROW_CHUNK):
            yield to_arrow(rows[i:i + ARROW_CHUNK])

    def commit(self, end: dict[str, int]) -> None:
        if time.monotonic() - self._last_prune > CLAIM_MARKER_PRUNE_S:
            store = store_for(self.options.store_url, self.options.buckets)
            try:
                store.forget_claims(before_ms=time.time_ns() // 1_000_000 - CLAIM_MARKER_KEEP_MS)
            except StoreError as exc:  # housekeeping: the next commit tries again
                log.warning("dispatcher: could not prune claim markers: %s", exc)
                return
            self._last_prune = time.monotonic()


class TocsinDataSource(DataSource):
    """``spark.readStream.format("tocsin")`` (due schedules) and
    ``writeStream.format("tocsin")`` (delivery); options are :class:`DispatchOptions`."""

    @classmethod
    def name(cls) -> str:
        return "tocsin"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def streamReader(self, schema: StructType) -> DueStreamReader:
        return DueStreamReader(DispatchOptions.from_spark(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> Any:
        from tocsin.dispatcher.sink import DeliveryStreamWriter

        return DeliveryStreamWriter(DispatchOptions.from_spark(self.options))

"""Recurring expansion: a Spark streaming query that turns the firings of recurring schedules
within the horizon into concrete schedules.

Offsets are ``{"until": ms}``; on the driver :meth:`ExpansionReader.latestOffset` asks the store
when some recurring schedule is next due for expansion and runs no batch until then. Each
partition is a bucket range of recurring schedules; on the executors :meth:`read` expands
each due one (:func:`~tocsin.dispatcher.expansion.expand_due`) with ``now = until`` and yields
one tally row. Expanding is idempotent: schedules get deterministic ids, and each recurring
moves on by compare-and-set on (revision, expanded_until), so a replayed batch or a second
dispatcher adds nothing. The sink adds the tallies up and beats ``expander``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from tocsin.dispatcher.expansion import ExpandTally, expand_due, messages_of
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runtime import log, retrying, store_for
from tocsin.errors import StoreError

__all__ = ["EXPANDER", "ExpandTally", "ExpansionDataSource", "expand_due", "messages_of"]

EXPANDER = "expander"
"""Component name of the expansion query's beat."""
_SCHEMA = "bucket_lo int, recurring bigint, firings bigint, messages bigint, skipped bigint"


@dataclass(frozen=True)
class RecurringRange(InputPartition):
    """One task's share of an expansion batch."""

    lo: int
    hi: int
    until_ms: int


@dataclass
class TallyMessage(WriterCommitMessage):
    tally: list[int]


class ExpansionReader(DataSourceStreamReader):
    """Offsets on the driver; expansion on the executors."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, int]:
        return {"until": 0}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        opts = self.options
        store = store_for(opts.store_url, opts.buckets)
        now = time.time_ns() // 1_000_000
        try:
            due = store.next_expansion_ms()
        except StoreError as exc:
            log.warning("expander: store unavailable, no batch: %s", exc)
            return start
        if due is None or due > now:
            return start
        return {"until": max(now, start["until"] + 1)}

    def partitions(self, start: dict[str, int],
                   end: dict[str, int]) -> Sequence[RecurringRange]:
        if start == end:
            return []
        from tocsin.dispatcher.source import bucket_ranges

        opts = self.options
        buckets = store_for(opts.store_url, opts.buckets).buckets
        return [RecurringRange(lo, hi, end["until"])
                for lo, hi in bucket_ranges(buckets, opts.partitions)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RecurringRange)
        opts = self.options
        store = store_for(opts.store_url, opts.buckets)
        tally = retrying(lambda: expand_due(store, bucket_lo=partition.lo,
                                            bucket_hi=partition.hi, now_ms=partition.until_ms,
                                            horizon_ms=opts.horizon_ms,
                                            max_per_minute=opts.max_per_minute),
                         what="expand")
        yield (partition.lo, tally.recurring, tally.firings, tally.messages, tally.skipped)

    def commit(self, end: dict[str, int]) -> None:
        pass


class ExpansionWriter(DataSourceStreamWriter):
    """Adds the tallies up and records them as the expander's beat."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> TallyMessage:
        total = [0, 0, 0, 0]
        for row in iterator:
            for i in range(4):
                total[i] += int(row[i + 1])
        return TallyMessage(total)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = [0, 0, 0, 0]
        for message in messages:
            if isinstance(message, TallyMessage):
                total = [a + b for a, b in zip(total, message.tally, strict=True)]
        store = store_for(self.options.store_url, self.options.buckets)
        try:
            last = store.last_beat(EXPANDER)
            before = last[1].get("totals", [0, 0, 0, 0]) if last else [0, 0, 0, 0]
            store.beat(EXPANDER, now_ms=time.time_ns() // 1_000_000,
                       info={"batch_id": batchId, "batch": dict(zip(_KEYS, total, strict=True)),
                             "totals": [a + b for a, b in zip(before, total, strict=True)]})
        except StoreError as exc:
            log.warning("expander: could not record batch %d: %s", batchId, exc)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


_KEYS = ("recurring", "firings", "messages", "skipped")


class ExpansionDataSource(DataSource):
    """``readStream.format("tocsin-recurring")`` and its sink."""

    @classmethod
    def name(cls) -> str:
        return "tocsin-recurring"

    def schema(self) -> str:
        return _SCHEMA

    def streamReader(self, schema: StructType) -> ExpansionReader:
        return ExpansionReader(DispatchOptions.from_spark(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> ExpansionWriter:
        return ExpansionWriter(DispatchOptions.from_spark(self.options))

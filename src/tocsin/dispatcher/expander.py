"""Recurring expansion as a Spark streaming query: the adapter of
:class:`~tocsin.dispatcher.expansion.ExpansionCore` to Spark.

Offsets are ``{"until": ms}``; on the driver :meth:`ExpansionReader.latestOffset` asks the store
when some recurring schedule is next due for expansion and runs no batch until then. Each
partition is a bucket range of recurring schedules; on the executors :meth:`read` expands each
due one with ``now = until`` and yields one tally row. The sink adds the tallies up and beats
``expander`` (:class:`~tocsin.dispatcher.beat.ExpanderBeat`).
"""

from __future__ import annotations

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

from tocsin.dispatcher.beat import EXPANDER_BEAT_KEYS
from tocsin.dispatcher.expansion import EXPANDER, ExpandTally, expand_due, messages_of
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runtime import worker

__all__ = ["EXPANDER", "ExpandTally", "ExpansionDataSource", "expand_due", "messages_of"]

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
        return worker().expansion(self.options).next_offset(start)

    def partitions(self, start: dict[str, int],
                   end: dict[str, int]) -> Sequence[RecurringRange]:
        return [RecurringRange(lo, hi, until)
                for lo, hi, until in worker().expansion(self.options).parts(start, end)]

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        assert isinstance(partition, RecurringRange)
        tally = worker().expansion(self.options).expand(partition.lo, partition.hi,
                                                        partition.until_ms)
        yield (partition.lo, *(getattr(tally, k) for k in EXPANDER_BEAT_KEYS))

    def commit(self, end: dict[str, int]) -> None:
        pass


class ExpansionWriter(DataSourceStreamWriter):
    """Adds the tallies up and records them as the expander's beat."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options

    def write(self, iterator: Iterator[Any]) -> TallyMessage:
        total = [0] * len(EXPANDER_BEAT_KEYS)
        for row in iterator:
            total = [a + int(b) for a, b in zip(total, row[1:], strict=True)]
        return TallyMessage(total)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = ExpandTally()
        for message in messages:
            if isinstance(message, TallyMessage):
                recurring, firings, made, skipped = message.tally
                total.add(ExpandTally(recurring=recurring, firings=firings, messages=made,
                                      skipped=skipped))
        worker().expansion(self.options).record_batch(batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


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

"""The dispatcher's source: a Python Data Source stream reader over the store.

Offsets are ``{"until": ms, "epoch": n}``. On the driver, :meth:`DueStreamReader.latestOffset`
asks the store whether anything is claimable; when nothing is, it returns the previous offset
and Spark runs no batch. Otherwise it takes a new epoch from the store (the fencing token) and
``until = now``. Each partition is a bucket range; on the executors :meth:`read` claims, for the
batch's epoch, the due rows of its range (``due <= until``, no lower bound) up to its share of
the batch cap. Spark replays a failed batch with the same offsets: the store then returns the
rows that epoch already claimed and claims nothing new. The logic is
:class:`~tocsin.dispatcher.core.DispatchCore`'s; this module adapts it to Spark.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from tocsin.abc import ClaimedRow
from tocsin.dispatcher.core import BucketSpan, bucket_ranges
from tocsin.dispatcher.options import DispatchOptions
from tocsin.dispatcher.runtime import worker

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SPARK_SCHEMA", "DueStreamReader", "RelayDataSource", "TocsinDataSource",
           "arrow_schema", "bucket_ranges", "from_arrow", "to_arrow"]

_NOT_TEXT = {"payload": "binary", "due_ms": "int64", "attempt": "int32", "epoch": "int64",
             "chain_base": "int32", "chain_ms": "int64"}
"""The Arrow type of each of :class:`~tocsin.abc.ClaimedRow`'s fields that is not a string."""
_SPARK_TYPES = {"string": "string", "binary": "binary", "int64": "bigint", "int32": "int"}
SPARK_SCHEMA = ", ".join(f"{name} {_SPARK_TYPES[_NOT_TEXT.get(name, 'string')]}"
                         for name in ClaimedRow._fields)
"""A claimed row as Spark's DDL (:func:`arrow_schema`'s, spelled for Spark)."""
ARROW_CHUNK = 10_000


@cache
def arrow_schema() -> pa.Schema:
    """A claimed row as Arrow: :class:`~tocsin.abc.ClaimedRow`'s fields, in its order, every
    column typed (an empty or all-null column would otherwise fail Spark's schema check).
    Arrow is imported here, in the executors, not when the driver registers the source: it
    was 36 MB of the driver's memory for good."""
    import pyarrow as pa

    return pa.schema([(name, getattr(pa, _NOT_TEXT.get(name, "string"))())
                      for name in ClaimedRow._fields])


@dataclass(frozen=True)
class BucketRange(InputPartition):
    """One Spark task's share of a batch (a :class:`~tocsin.dispatcher.core.BucketSpan`)."""

    span: BucketSpan


def from_arrow(batch: pa.RecordBatch) -> list[ClaimedRow]:
    """A record batch of :func:`arrow_schema` as claimed rows (joined by name, not position)."""
    columns = [batch.column(name).to_pylist() for name in ClaimedRow._fields]
    return [ClaimedRow(*r) for r in zip(*columns, strict=True)]


def to_arrow(rows: Sequence[ClaimedRow]) -> pa.RecordBatch:
    """Claimed rows as one record batch of :func:`arrow_schema` (every column typed)."""
    import pyarrow as pa

    schema = arrow_schema()
    columns = list(zip(*rows, strict=True)) if rows else [()] * len(schema)
    return pa.RecordBatch.from_arrays(
        [pa.array(col, type=f.type) for col, f in zip(columns, schema, strict=True)],
        schema=schema)


class DueStreamReader(DataSourceStreamReader):
    """Offsets and partitions on the driver; claims on the executors."""

    def __init__(self, options: DispatchOptions) -> None:
        self.options = options

    def initialOffset(self) -> dict[str, int]:
        return {"until": 0, "epoch": 0}

    def latestOffset(self, start: dict[str, int], limit: Any) -> dict[str, int]:
        return worker().dispatch(self.options).next_offset(start)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[BucketRange]:
        return [BucketRange(span) for span in worker().dispatch(self.options).parts(start, end)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, BucketRange)
        if self.options.relay:  # the relay's tasks only hold windows (in the sink)
            return
        rows = worker().dispatch(self.options).claim(partition.span)
        for i in range(0, len(rows), ARROW_CHUNK):
            yield to_arrow(rows[i:i + ARROW_CHUNK])

    def commit(self, end: dict[str, int]) -> None:
        worker().dispatch(self.options).prune()


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


class RelayDataSource(TocsinDataSource):
    """The same source and sink under the name ``tocsin-relay``, for the relay query: a data
    source's Python function is one object per registered name, and two queries starting at
    once over one name raced in serializing it (``OptionalDataException`` in every task of
    both after a restart)."""

    @classmethod
    def name(cls) -> str:
        return "tocsin-relay"

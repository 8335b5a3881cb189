"""Which rows of an Arrow batch (a CSV or Parquet import) are plain, decided column by column:
each field a text of the model's lengths free of NUL (Arrow text is UTF-8, so it holds no lone
surrogate), a key, a tenant name, one of ``payload`` (JSON text) or ``payload_text``, nothing
else given. Their schedules are then built by
:meth:`tocsin.validation.schedule.ScheduleCheck.plain`, the very values the model builds; every
other row goes the row's way (:meth:`tocsin.pipelines.rows.RowShape.item` and
:meth:`~tocsin.validation.schedule.ScheduleCheck.check`).

Spark-free: the executors call it, and fast tests too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from tocsin.pipelines.rows import RowShape
from tocsin.validation.schedule import PLAIN_TENANT, TEXT_LIMITS

__all__ = ["PlainColumns", "plain_columns"]

_TEXT = ("channel", "key", "ordering_key", "policy", "tenant", "due_at", "payload",
         "payload_text", "delay")
"""The fields a plain row may give."""
_CHECKED = ("channel", "key", "ordering_key", "policy", "tenant", "due_at", "delay")
"""Fields whose text must be free of NUL (a payload's text may hold one)."""


@dataclass(frozen=True, slots=True)
class PlainColumns:
    """A batch's fields as Python lists (None: not given) and, for each row, whether it is
    plain."""

    plain: list[bool]
    channel: list[Any]
    key: list[Any]
    ordering_key: list[Any]
    policy: list[Any]
    tenant: list[Any]
    due_at: list[Any]
    delay: list[Any]
    payload: list[Any]
    payload_text: list[Any]


def _text(column: pa.Array) -> bool:
    return bool(pa.types.is_string(column.type) or pa.types.is_large_string(column.type))


def _none(rows: int) -> pa.Array:
    return pa.nulls(rows, pa.string())


def plain_columns(batch: pa.RecordBatch, shape: RowShape) -> PlainColumns | None:
    """The batch's plain rows and their fields (after ``shape``'s column mapping); None when
    no row can be (a column of another type, a mapping onto a column that is also there)."""
    columns = {name: column.cast(pa.string()) if pa.types.is_null(column.type) else column
               for name, column in zip(batch.schema.names, batch.columns, strict=True)}
    for field, column in shape.mapping:
        if column in columns and column != field:
            if field in columns:
                return None
            columns[field] = columns.pop(column)
    rows = batch.num_rows
    plain = pa.array([True] * rows)
    for name, column in columns.items():
        if name not in _TEXT:
            # Given (not null), a field the model forbids or a plain row leaves out.
            plain = pc.and_kleene(plain, pc.is_null(column))
        elif name != "delay" and not _text(column):
            return None
    delay = columns.get("delay", _none(rows))
    if not (_text(delay) or pa.types.is_floating(delay.type) or pa.types.is_integer(delay.type)):
        return None
    given = {name: columns.get(name, _none(rows)) for name in _TEXT}
    for name in _CHECKED:
        column = given[name] if name != "delay" else delay
        if not _text(column):
            continue
        ok = pc.invert(pc.match_substring(column, "\x00"))
        if name in TEXT_LIMITS:
            length = pc.utf8_length(column)
            ok = pc.and_kleene(ok, pc.and_kleene(pc.greater(length, 0),
                                                 pc.less_equal(length, TEXT_LIMITS[name])))
        if name == "tenant":
            ok = pc.and_kleene(ok, pc.match_substring_regex(column, f"^{PLAIN_TENANT}$"))
            if shape.tenant is not None:
                ok = pc.and_kleene(ok, pc.equal(column, shape.tenant))
        required = name in ("channel", "key")
        plain = pc.and_kleene(plain, ok if required else pc.or_kleene(pc.is_null(column), ok))
    # Exactly one payload, and one due time.
    plain = pc.and_kleene(plain, pc.xor(pc.is_valid(given["payload"]),
                                        pc.is_valid(given["payload_text"])))
    plain = pc.and_kleene(plain, pc.xor(pc.is_valid(given["due_at"]), pc.is_valid(delay)))
    lists = {name: column.to_pylist() for name, column in given.items() if name != "delay"}
    return PlainColumns(plain=pc.fill_null(plain, False).to_pylist(), delay=delay.to_pylist(),
                        **lists)

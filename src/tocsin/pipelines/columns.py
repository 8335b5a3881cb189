"""Which rows of an Arrow batch (a CSV or Parquet import) are plain, decided column by column:
each field a text of the model's lengths free of NUL (Arrow text is UTF-8, so it holds no lone
surrogate), a key or none (a key is derived), a tenant name, one of ``payload`` (JSON text or
a nested column) or ``payload_text``, ``headers`` or none, one of ``due_at`` (RFC 3339 text, a
timestamp with a zone, epoch milliseconds) or ``delay`` (seconds or ISO 8601 text), nothing
else given (a row giving ``labels`` or delivery terms goes the row's way). Their schedules
are then built by
:meth:`tocsin.validation.schedule.ScheduleCheck.plain`, the very values the model builds; every
other row goes the row's way (:meth:`tocsin.pipelines.rows.RowShape.item` and
:meth:`~tocsin.validation.schedule.ScheduleCheck.check`).

A due time given as a timestamp or as epoch milliseconds reaches the model as the text
:meth:`~tocsin.pipelines.rows.RowShape.item` writes for it (``datetime.isoformat`` in the
column's zone): here that text is made for the whole column at once when the zone is UTC,
and the due time is the column's own integer, so no row's text is parsed back.

Spark-free: the executors call it, and fast tests too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.compute as pc

from tocsin.clock import to_ms
from tocsin.pipelines.rows import EPOCH_MS, RowShape, SourceFormat
from tocsin.validation.parsing import MAX_DUE_MS, one_instant
from tocsin.validation.schedule import PLAIN_TENANT, TEXT_LIMITS

__all__ = ["PlainColumns", "plain_columns"]

_FIELDS = ("channel", "key", "ordering_key", "policy", "tenant", "due_at", "delay", "payload",
           "payload_text", "headers")
"""The fields a plain row may give."""
_CHECKED = ("channel", "key", "ordering_key", "policy", "tenant", "due_at", "delay")
"""Fields whose text must be free of NUL (a payload's text may hold one; headers are looked
at row by row, once read)."""
_UTC = frozenset({"UTC", "Etc/UTC", "+00:00", "Etc/GMT", "GMT", "Etc/Universal", "Universal",
                  "Etc/Zulu", "Zulu", "UCT", "Etc/UCT"})
"""Zones whose ``datetime.isoformat`` ends ``+00:00`` at every instant."""


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
    """RFC 3339 text, as :meth:`~tocsin.pipelines.rows.RowShape.item` gives it the model."""
    due_ms: list[Any] | None
    """The due times, where known to lie in the grace window (None: read from ``due_at``'s
    text row by row)."""
    delay: list[Any]
    payload: list[Any]
    payload_read: bool
    """Whether ``payload`` holds values (a nested column), not JSON text."""
    payload_text: list[Any]
    headers: list[Any]
    headers_read: bool
    """Whether ``headers`` holds dicts (a struct column), not JSON text."""


def _text(column: pa.Array) -> bool:
    return bool(pa.types.is_string(column.type) or pa.types.is_large_string(column.type))


def _json_type(kind: pa.DataType) -> bool:
    """Whether every value of ``kind`` comes out of Arrow as a value JSON holds as it is
    (a struct as a dict, a list as a list, numbers, text, booleans; not a map, which comes
    out as pairs, nor bytes, decimals or times)."""
    if pa.types.is_struct(kind):
        return all(_json_type(kind.field(i).type) for i in range(kind.num_fields))
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _json_type(kind.value_type)
    return bool(pa.types.is_string(kind) or pa.types.is_large_string(kind)
                or pa.types.is_integer(kind) or pa.types.is_floating(kind)
                or pa.types.is_boolean(kind) or pa.types.is_null(kind))


def _headers_type(kind: pa.DataType) -> bool:
    """A struct of text fields: each row's headers as a dict of text."""
    return bool(pa.types.is_struct(kind) and all(
        _text(pa.nulls(0, kind.field(i).type)) for i in range(kind.num_fields)))


def _none(rows: int) -> pa.Array:
    return pa.nulls(rows, pa.string())


def _utc_text(micros: pa.Array) -> pa.Array:
    """``datetime.isoformat`` of UTC instants given in microseconds since the epoch (years
    1970 to 9999): ``2027-01-15T09:00:00+00:00``, ``…:00.125000+00:00``."""
    seconds = pc.divide(micros, 1_000_000)
    fraction = pc.subtract(micros, pc.multiply(seconds, 1_000_000))
    whole = pc.strftime(seconds.cast(pa.timestamp("s")), "%Y-%m-%dT%H:%M:%S")
    digits = pc.utf8_lpad(fraction.cast(pa.string()), 6, "0")
    tail = pc.if_else(pc.equal(fraction, 0), pa.scalar("+00:00"),
                      pc.binary_join_element_wise(".", digits, "+00:00", ""))
    return pc.binary_join_element_wise(whole, tail, "")


_SCALE = {"s": 1_000_000, "ms": 1_000, "us": 1}
"""Microseconds in one unit of a timestamp column (a nanosecond column, which Spark does not
hand over, goes the row's way)."""


_SIMPLE = ("^[0-9]{4}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:"
           "[0-5][0-9]([.][0-9]{1,6})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$")
"""RFC 3339 text that Arrow reads to the instant Python's ``datetime.fromisoformat`` reads
(another, or a day that no month has, is read row by row)."""


def _parsed(column: pa.Array, earliest_ms: int) -> pa.Array:
    """The due times of a text column's simple RFC 3339 rows within the grace window and
    year 9999, read by Arrow; null for the others (read row by row)."""
    rows = len(column)
    none = pa.nulls(rows, pa.int64())
    simple = pc.fill_null(pc.match_substring_regex(column, _SIMPLE), False)
    if not pc.any(simple).as_py():
        return none
    try:
        micros = pc.if_else(simple, column, pa.scalar(None, pa.string())).cast(
            pa.timestamp("us", tz="UTC")).cast(pa.int64())
    except pa.ArrowInvalid:
        return none
    ok = pc.and_(pc.greater_equal(micros, max(earliest_ms, 0) * 1_000),
                 pc.less_equal(micros, MAX_DUE_MS * 1_000 + 999))
    return pc.divide(pc.if_else(ok, micros, pa.scalar(None, pa.int64())), 1_000)


def _due(column: pa.Array, shape: RowShape, earliest_ms: int,
         ) -> tuple[pa.Array, pa.Array | None, pa.Array]:
    """``due_at`` as the model reads it: its text, its due times (None, or a null: parsed
    from the text row by row), and which rows may be plain (a timestamp or epoch value
    before ``earliest_ms`` or after year 9999 goes the row's way, whose answer names it)."""
    rows = len(column)
    everyone = pa.array([True] * rows)
    if _text(column):
        parsed = _parsed(column, earliest_ms)
        if shape.zone is not None:
            # text without an offset is read in the zone by the row's way (so is any text
            # Arrow did not read: the row's way tells the two apart as Python does)
            everyone = pc.or_(pc.is_valid(parsed), pc.is_null(column))
        if shape.format is not SourceFormat.CSV:
            return column, parsed, everyone
        epoch = pc.fill_null(pc.match_substring_regex(column, f"^{EPOCH_MS.pattern}$"), False)
        if not pc.any(epoch).as_py():
            return column, parsed, everyone
        # A CSV cell of digits is epoch milliseconds; the others are text.
        ms = pc.if_else(epoch, column, pa.scalar(None, pa.string())).cast(pa.int64())
        text, due_ms, ok = _due(ms, shape, earliest_ms)
        assert due_ms is not None
        return (pc.if_else(epoch, text, column), pc.if_else(epoch, due_ms, parsed),
                pc.if_else(epoch, ok, everyone))
    if pa.types.is_timestamp(column.type) and column.type.tz is None \
            and shape.zone is not None and column.type.unit in _SCALE:
        return _in_zone(column, shape.zone, earliest_ms)
    if pa.types.is_timestamp(column.type) and column.type.tz is not None \
            and column.type.unit in _SCALE:
        scale = _SCALE[column.type.unit]
    elif pa.types.is_integer(column.type):
        scale = 1_000  # epoch milliseconds
    else:  # naive times (refused as the API refuses them), anything else: the row's way
        return _none(rows), None, pc.is_null(column)
    raw = column.cast(pa.int64())
    low = -(-max(earliest_ms, 0) * 1_000 // scale)
    high = (MAX_DUE_MS * 1_000 + 999) // scale
    ok = pc.fill_null(pc.and_(pc.greater_equal(raw, low), pc.less_equal(raw, high)), True)
    micros = pc.multiply(pc.if_else(ok, raw, pa.scalar(None, pa.int64())), scale)
    if pa.types.is_timestamp(column.type) and column.type.tz not in _UTC:
        kept = pc.if_else(ok, column, pa.scalar(None, column.type)).to_pylist()
        text = pa.array([None if v is None else v.isoformat() for v in kept], pa.string())
    else:
        text = _utc_text(micros)
    return text, pc.divide(micros, 1_000), ok


def _in_zone(column: pa.Array, zone: ZoneInfo, earliest_ms: int,
             ) -> tuple[pa.Array, pa.Array, pa.Array]:
    """A naive timestamp column's wall-clock times in ``zone`` (``--zone``), as :func:`_due`
    answers: read by Python's rules of the zone, as the row's way reads them (Arrow's end in
    2037, after which it gives no summer time). A time the zone skips or passes twice, or one
    outside the window, goes the row's way, whose answer names it."""
    texts: list[str | None] = []
    due_ms: list[int | None] = []
    ok: list[bool] = []
    low = max(earliest_ms, 0)
    for wall in column.to_pylist():
        if wall is None:  # a field not given
            texts.append(None)
            due_ms.append(None)
            ok.append(True)
            continue
        instant = one_instant(wall, zone)
        ms = None if instant is None else to_ms(instant)
        plain = ms is not None and low <= ms <= MAX_DUE_MS
        texts.append(instant.isoformat() if plain and instant is not None else None)
        due_ms.append(ms if plain else None)
        ok.append(plain)
    return pa.array(texts, pa.string()), pa.array(due_ms, pa.int64()), pa.array(ok)


def plain_columns(batch: pa.RecordBatch, shape: RowShape, *,
                  earliest_ms: int = 0) -> PlainColumns | None:
    """The batch's plain rows and their fields (after ``shape``'s column mapping); None when
    no row can be (a mapping onto a column that is also there). A field given in a column of
    a type no plain row has makes the rows giving it go the row's way. ``earliest_ms``: a
    timestamp or epoch due time before it (the grace window) is left to the row's way."""
    columns = {name: column.cast(pa.string()) if pa.types.is_null(column.type) else column
               for name, column in zip(batch.schema.names, batch.columns, strict=True)}
    for field, column in shape.mapping:
        if column in columns and column != field:
            if field in columns:
                return None
            columns[field] = columns.pop(column)
    rows = batch.num_rows
    plain = pa.array([True] * rows)

    def unless_given(column: pa.Array) -> None:
        nonlocal plain
        plain = pc.and_kleene(plain, pc.is_null(column))

    given = {name: columns.get(name, _none(rows)) for name in _FIELDS}
    for name, column in columns.items():
        if name not in _FIELDS:
            unless_given(column)  # a field the model forbids, or a plain row leaves out
    for name in ("channel", "key", "ordering_key", "policy", "tenant", "payload_text"):
        if not _text(given[name]):
            unless_given(given[name])
            given[name] = _none(rows)
    delay = given["delay"]
    if not (_text(delay) or pa.types.is_floating(delay.type) or pa.types.is_integer(delay.type)):
        unless_given(delay)
        given["delay"] = _none(rows)
    payload_read = not _text(given["payload"])
    if payload_read and not _json_type(given["payload"].type):
        unless_given(given["payload"])
        given["payload"] = _none(rows)
    headers_read = not _text(given["headers"])
    if headers_read and not _headers_type(given["headers"].type):
        unless_given(given["headers"])
        given["headers"] = _none(rows)
    due_given = pc.is_valid(given["due_at"])
    due_text, due_ms, due_ok = _due(given["due_at"], shape, earliest_ms)
    plain = pc.and_kleene(plain, due_ok)
    given["due_at"] = due_text
    for name in _CHECKED:
        column = given[name]
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
        plain = pc.and_kleene(plain, ok if name == "channel"
                              else pc.or_kleene(pc.is_null(column), ok))
    # Exactly one payload, and one due time.
    plain = pc.and_kleene(plain, pc.xor(pc.is_valid(given["payload"]),
                                        pc.is_valid(given["payload_text"])))
    plain = pc.and_kleene(plain, pc.xor(due_given, pc.is_valid(given["delay"])))
    lists = {name: column.to_pylist() for name, column in given.items()}
    return PlainColumns(plain=pc.fill_null(plain, False).to_pylist(),
                        due_ms=None if due_ms is None else due_ms.to_pylist(),
                        payload_read=payload_read, headers_read=headers_read, **lists)

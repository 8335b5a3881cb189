"""From a source row to the item ``POST /v1/schedules`` takes: the formats a bulk import
reads, the column mapping, the tenant, and the key a row without one is given.

Spark-free: the executors call it, and fast tests too.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

from tocsin.clock import from_ms
from tocsin.domain.labels import labels_of_text
from tocsin.errors import ValidationError
from tocsin.validation.nesting import DEFAULT_DEPTH, too_deep
from tocsin.validation.parsing import has_no_offset, in_zone
from tocsin.validation.schedule import Problem

__all__ = ["DERIVED_KEY_PREFIX", "EPOCH_MS", "RowShape", "SourceFormat", "derived_key",
           "json_value", "parse_mapping", "row_digest"]

DERIVED_KEY_PREFIX = "import:"
"""Keys made for rows that give none start with this."""
_NUMBER = re.compile(r"^\s*[0-9]+(\.[0-9]*)?\s*$")
EPOCH_MS = re.compile(r"[0-9]{1,15}")
"""A CSV ``due_at`` cell of digits alone (the whole cell): epoch milliseconds (a pattern
Python and RE2 read alike)."""
_JSON_TEXT = ("payload", "headers", "retry")
"""Fields that a CSV or Parquet text column gives as JSON text."""
_NOT_JSON_HINTS = {"payload": " (a payload of plain text goes in a payload_text column: "
                              "--map payload_text=payload)"}
"""What a reject says after "not JSON text" for a field whose text has a field of its own."""


class SourceFormat(StrEnum):
    """What a bulk import reads."""

    JSON = "json"
    """JSON lines: each line one object, exactly the body of ``POST /v1/schedules``."""
    CSV = "csv"
    """CSV with a header row; ``payload`` and ``headers`` cells hold JSON text, a numeric
    ``delay`` is seconds, an empty cell is a field not given."""
    PARQUET = "parquet"
    """Parquet; a text ``payload`` or ``headers`` column holds JSON text, a null is a field
    not given, nested columns are JSON values."""

    @classmethod
    def named(cls, name: str) -> SourceFormat:
        """The format ``--format`` names; another name is a :class:`ValidationError`."""
        try:
            return cls(name.strip().lower())
        except ValueError:
            raise ValidationError("format", f"{name!r} is not json, csv or parquet") from None

    @classmethod
    def of(cls, path: str) -> SourceFormat:
        """The format a path's name says (``.jsonl``/``.json``/``.ndjson``, ``.csv``,
        ``.parquet``); a folder is named by its first such file."""
        local = Path(path.removeprefix("file://"))
        names = [local.name]
        if local.is_dir():
            names = sorted(p.name for p in local.rglob("*") if p.is_file()
                           and not p.name.startswith(("_", ".")))
        for name in names:
            suffix = name.rsplit(".", 1)[-1].lower() if "." in name else ""
            if suffix in ("jsonl", "json", "ndjson"):
                return cls.JSON
            if suffix in ("csv", "parquet"):
                return cls(suffix)
        raise ValidationError("format", f"cannot tell the format of {path!r} from its name: "
                                        "give --format json, csv or parquet")


def parse_mapping(pairs: list[str]) -> tuple[tuple[str, str], ...]:
    """``["channel=queue", ...]`` as ``(("channel", "queue"), ...)``: field ← column. The
    field must be one of a schedule's (``POST /v1/schedules``), each mapped once."""
    from tocsin.validation.models import ScheduleIn

    fields = sorted(ScheduleIn.model_fields)
    out: dict[str, str] = {}
    for pair in pairs:
        field, sep, column = (part.strip() for part in pair.partition("="))
        if not sep or not field or not column:
            raise ValidationError("map", f"{pair!r} is not FIELD=COLUMN")
        if field not in fields:
            raise ValidationError("map", f"{field!r} is not a field of a schedule (one of "
                                         f"{', '.join(fields)})")
        if field in out:
            raise ValidationError("map", f"{field!r} is mapped twice")
        out[field] = column
    return tuple(out.items())


def _digest_encoder() -> Any:
    """``json.dumps(item, sort_keys=True, separators=(",", ":"), default=str)``, as one
    encoder made once (``json.dumps`` makes a new one each call: a third of a digest's
    time); the same text but for circular values, which a row cannot hold."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        encoder = json.JSONEncoder(sort_keys=True, separators=(",", ":"), default=str)
        return encoder.encode
    encode = make(None, str, json.encoder.encode_basestring_ascii, None, ":", ",", True, False,
                  True)
    return lambda item: "".join(encode(item, 0))


_canonical = _digest_encoder()


def row_digest(source: str, item: dict[str, Any]) -> str:
    """A digest of a row's source (the file's path within the import) and its content as
    canonical JSON: the request digest of a row that gives no key, and the end of the key it
    is given (:func:`derived_key`). Importing the same file again finds the same keys;
    identical rows of one file are one schedule."""
    text = _canonical(item)
    return hashlib.sha256(f"{source}\n{text}".encode("utf-8", "surrogatepass")).hexdigest()


def derived_key(digest: str, due_ms: int, *, now_ms: int | None, source: str) -> str:
    """The key of a row that gives none: :data:`DERIVED_KEY_PREFIX`, the row's due time
    (``t`` and the instant its ``due_at`` names, or, given ``now_ms`` for a row that gives a
    ``delay``, ``d`` and the delay: the same in every run of the import), in milliseconds as
    12 hex digits, ``:``, 8 hex digits of its file's name (``source``), ``:`` and the first
    40 hex digits of its :func:`row_digest`.

    The time comes first so that the rows of an export, which mostly come in due order, land
    side by side in the store's index of keys: with the digest alone every row changed a page
    of it at a random place, which each transaction wrote again (SQLite: 35 -> 46 us a row
    over 400 000 rows, and the wall clock halved, against a flat 33 us with the time first).
    The file comes next so that rows sharing a time (a delay, mostly) are kept together by
    file, which an import's writer mostly reads one at a time: each transaction changes that
    file's part of the index, not pages all over it (SQLite, 300 000 rows of one delay in 8
    files: 37 620 -> 52 289 rows/s). Both are the row's own: a re-run finds the same key."""
    tag = _file_tag(source)
    if now_ms is None:
        return f"{DERIVED_KEY_PREFIX}t{due_ms:012x}:{tag}:{digest[:40]}"
    return f"{DERIVED_KEY_PREFIX}d{due_ms - now_ms:012x}:{tag}:{digest[:40]}"


@lru_cache(maxsize=1024)
def _file_tag(source: str) -> str:
    """8 hex digits of a file's name within the import."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def _labels(row: dict[str, Any]) -> Problem | None:
    """A CSV or Parquet row's ``labels`` as the object the API takes: text (``k=v,k2=v2`` or
    a JSON object), a map column's pairs, a struct column's fields (a null one is a label not
    given); the model then checks them as it checks the API's."""
    labels = row["labels"]
    if isinstance(labels, str):
        try:
            row["labels"] = labels_of_text(labels)
        except ValidationError as exc:
            return Problem(exc.field, exc.reason)
    elif isinstance(labels, list) and all(type(p) is tuple and len(p) == 2 for p in labels):
        row["labels"] = dict(labels)
    elif isinstance(labels, dict):
        row["labels"] = {k: v for k, v in labels.items() if v is not None}
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


_JSON = json.JSONDecoder(parse_constant=_no_constant)
"""JSON text as a value; Infinity and NaN are not JSON (one decoder for every call)."""
_scan: Callable[[str, int], tuple[Any, int]] = _JSON.scan_once  # type: ignore[attr-defined]
_NOT_FIRST = frozenset(("", " ", "\t", "\n", "\r", "\ufeff"))
"""How JSON text that only ``decode`` reads may start: whitespace, a byte order mark,
nothing."""


def json_value(text: str) -> Any:
    """The value of JSON ``text`` (ValueError when it is not JSON).

    Text that starts with a value and ends with it is read by the decoder's scanner alone,
    which is what ``decode`` runs then (0.5 us, against 1.25 through ``decode``'s two
    matches of whitespace and its calls); any other text goes through ``decode``."""
    if text[:1] not in _NOT_FIRST:
        try:
            value, end = _scan(text, 0)
        except StopIteration:
            pass  # decode raises its own error
        else:
            if end == len(text):
                return value
    if text.startswith("\ufeff"):
        return json.loads(text)  # refuses it, naming the byte order mark
    return _JSON.decode(text)


@dataclass(frozen=True, kw_only=True, slots=True)
class RowShape:
    """How this import's rows become items: their format, the column mapping
    (field ← column) and the tenant every row goes to (None: the row's own, or default)."""

    format: SourceFormat
    mapping: tuple[tuple[str, str], ...] = ()
    tenant: str | None = None
    max_depth: int = DEFAULT_DEPTH
    """The deepest nesting a JSON line may have (``max_json_depth``): deeper is a reject."""
    zone: ZoneInfo | None = None
    """The zone whose wall-clock times the due times without an offset name (a naive
    timestamp column, text without ``Z`` or ``+hh:mm``): ``tocsin import --zone``. None:
    such times are refused, as the API refuses them."""

    def item(self, raw: Any, *, source: str) -> tuple[dict[str, Any], str | None] | Problem:
        """The item for ``raw`` (a JSON line, or a CSV/Parquet row as a dict) and, when it
        gives no key, its :func:`row_digest`; or why not."""
        if self.format is SourceFormat.JSON:
            if (deep := too_deep(raw, self.max_depth)) is not None:
                return Problem("body", deep)
            try:
                row = json_value(raw)
            except (ValueError, RecursionError) as exc:
                return Problem("body", f"malformed JSON: {exc}")
            if not isinstance(row, dict):
                return Problem("body", "a line must hold one JSON object")
        else:
            row = {k: v for k, v in raw.items() if v is not None}
        for field, column in self.mapping:
            if column in row:
                row[field] = row.pop(column)
        if self.format is not SourceFormat.JSON and (problem := self._typed(row)) is not None:
            return problem
        if type(due_at := row.get("due_at")) is str and has_no_offset(due_at):
            if self.zone is None:
                return Problem("due_at", f"{due_at!r} has no offset (Z or +hh:mm): give one, "
                                         "or name the zone whose wall clock it reads with "
                                         "tocsin import --zone, e.g. --zone Europe/Berlin")
            try:
                row["due_at"] = in_zone(due_at, self.zone)
            except ValidationError as exc:
                return Problem(exc.field, exc.reason)
        digest = (row_digest(source, row) if "key" not in row and "uniqueness_key" not in row
                  else None)
        if self.tenant is not None and row.setdefault("tenant", self.tenant) != self.tenant:
            return Problem("tenant", f"this import writes to tenant {self.tenant!r}, "
                                     f"not {row['tenant']!r}")
        return row, digest

    def _typed(self, row: dict[str, Any]) -> Problem | None:
        """Turn text cells into the JSON values they stand for."""
        for field in _JSON_TEXT:
            if isinstance(row.get(field), str):
                try:
                    row[field] = json_value(row[field])
                except ValueError as exc:
                    return Problem(field, f"not JSON text: {exc}"
                                          f"{_NOT_JSON_HINTS.get(field, '')}")
        for field, value in row.items():
            if isinstance(value, datetime):  # a naive one stays naive: refused like the API's
                row[field] = value.isoformat()
        if "labels" in row and (problem := _labels(row)) is not None:
            return problem
        if "due_at" in row:
            row["due_at"] = self.due_at(row["due_at"])
        for field in ("delay", "max_lateness"):
            if field in row:
                row[field] = self.delay(row[field])
        return None

    def due_at(self, value: Any) -> Any:
        """A due time given as epoch milliseconds (an integer column, a CSV cell of digits) as
        the RFC 3339 text a UTC timestamp column gives (``2027-01-15T09:00:00.250000+00:00``);
        anything else as it is."""
        if type(value) is str:
            if self.format is not SourceFormat.CSV or not EPOCH_MS.fullmatch(value):
                return value
            value = int(value)
        elif type(value) is not int:
            return value
        try:
            return from_ms(value).isoformat()
        except OverflowError:
            return value

    def delay(self, value: Any) -> Any:
        """A CSV cell's delay: a number of seconds when it reads as one."""
        if self.format is SourceFormat.CSV and isinstance(value, str) and _NUMBER.match(value):
            return float(value)
        return value

    def text(self, raw: Any) -> str:
        """The row as it goes to the rejects folder: the line itself, or the row as JSON."""
        if isinstance(raw, str):
            return raw
        return json.dumps({k: v for k, v in raw.items() if v is not None}, default=str)

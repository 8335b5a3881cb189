"""Parsing the HTTP edge's friendly input once into Tocsin's canonical forms: due times as UTC
milliseconds, payloads as bytes and a kind, requests as a digest."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from zoneinfo import ZoneInfo

from tocsin.clock import to_ms
from tocsin.domain import PayloadKind
from tocsin.errors import ValidationError

if TYPE_CHECKING:
    from tocsin.validation.models import RecurringChange, ScheduleChange, ScheduleIn

__all__ = [
    "MAX_DUE_MS",
    "canonical_digest",
    "canonical_json",
    "check_message_size",
    "compact_json",
    "due_of",
    "has_no_offset",
    "header_bytes",
    "in_zone",
    "json_text",
    "one_instant",
    "parse_duration",
    "parse_instant",
    "payload_of",
]

MAX_DUE_MS = 253_402_300_799_999
"""The latest due time accepted: 9999-12-31T23:59:59.999Z."""
MIN_INSTANT_MS = -62_135_596_800_000
"""The earliest instant accepted anywhere: 0001-01-01T00:00:00Z."""
_ISO_DURATION = re.compile(
    r"^P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$",
    re.ASCII)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), allow_nan=False)
"""Canonical JSON (one encoder for every call: ``json.dumps`` with these options makes a new
one each time)."""
_COMPACT = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
"""A JSON payload as stored: no spaces, keys in the client's order."""


def _c_encoder(sort_keys: bool) -> Any:
    """What ``JSONEncoder.encode`` runs (the C encoder, compact, ASCII, no NaN), made once
    rather than on each call, without the check for circular values (JSON values are trees);
    None where the C encoder is missing."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    return make(None, _CANONICAL.default, json.encoder.encode_basestring_ascii, None, ":", ",",
                sort_keys, False, False)


_CANONICAL_C, _COMPACT_C = _c_encoder(True), _c_encoder(False)
json_text = json.encoder.encode_basestring_ascii
"""A string as JSON text, ASCII (what both encoders write for one)."""
_WALL_CLOCK = r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?"
_RFC3339 = re.compile(_WALL_CLOCK + r"([Zz]|[+-]\d{2}:\d{2})$")
_NAIVE = re.compile(_WALL_CLOCK + "$")
"""An RFC 3339 time but for its offset: what :func:`in_zone` reads as a wall-clock time."""



def compact_json(value: Any) -> bytes:
    """A JSON payload as stored: compact, keys in the client's order, ASCII (non-ASCII text
    as escapes); ``ValueError`` for a value JSON cannot hold (an infinity, NaN)."""
    if _COMPACT_C is None or isinstance(value, str):
        return _COMPACT.encode(value).encode()
    return "".join(_COMPACT_C(value, 0)).encode()


def canonical_json(value: Any) -> str:
    """``value`` as canonical JSON: sorted keys, no spaces, ASCII."""
    if _CANONICAL_C is None or isinstance(value, str):
        return _CANONICAL.encode(value)
    return "".join(_CANONICAL_C(value, 0))


def canonical_digest(value: Any) -> str:
    """SHA-256 of ``value`` as canonical JSON (sorted keys, no spaces): two requests that differ
    only in key order or spacing get the same digest."""
    return hashlib.sha256(canonical_json(value).encode()).hexdigest()


def parse_duration(value: float | str, field: str = "delay") -> timedelta:
    """Seconds, or an ISO 8601 duration (``PT5M``, ``P1DT2H``), as a timedelta."""
    if isinstance(value, bool):
        raise ValidationError(field, "must be a number of seconds or an ISO 8601 duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        match = _ISO_DURATION.match(value.strip())
        if not match or value.strip() in ("P", "PT") or value.strip().endswith("T"):
            raise ValidationError(
                field, f"{value!r} is not an ISO 8601 duration like PT5S or P1DT2H"
            )
        parts = {k: float(v) for k, v in match.groupdict().items() if v}
        seconds = (
            parts.get("w", 0) * 604800
            + parts.get("d", 0) * 86400
            + parts.get("h", 0) * 3600
            + parts.get("m", 0) * 60
            + parts.get("s", 0)
        )
    if not math.isfinite(seconds):
        raise ValidationError(field, "must be a finite number of seconds")
    if seconds < 0:
        raise ValidationError(field, "must not be negative")
    if seconds > MAX_DUE_MS / 1000:
        raise ValidationError(field, f"{value!r} is too long: the latest due time is year 9999")
    return timedelta(seconds=seconds)


def has_no_offset(value: str) -> bool:
    """Whether ``value`` is an RFC 3339 time but for its offset (``2027-01-15 09:00:00``):
    a wall-clock time, which names an instant only in a zone."""
    return _NAIVE.match(value.strip()) is not None


def in_zone(value: str, zone: ZoneInfo, field: str = "due_at") -> str:
    """``value``, an RFC 3339 time without an offset (``2027-01-15 09:00:00``), as the
    wall-clock time it names in ``zone``: the same time with the zone's offset then
    (``2027-01-15T09:00:00+01:00``). Any other text is returned as it is, for
    :func:`parse_instant` to read or refuse. A wall-clock time the zone's clocks skip (they go
    forward over it) or pass twice (they go back over it) names no one instant: refused."""
    if not has_no_offset(value):
        return value
    text = value.strip()
    try:
        wall = datetime.fromisoformat(text)
    except ValueError as exc:
        raise ValidationError(field, f"{value!r}: {exc}") from exc
    if (instant := one_instant(wall, zone)) is not None:
        return instant.isoformat()
    skipped = wall.replace(tzinfo=zone).astimezone(UTC).astimezone(zone).replace(
        tzinfo=None) != wall
    raise ValidationError(field, (
        f"{value!r} does not exist in {zone.key}: its clocks go forward over it"
        if skipped else f"{value!r} happens twice in {zone.key}: its clocks go back over "
        "it") + "; give the time with an offset")


def one_instant(wall: datetime, zone: ZoneInfo) -> datetime | None:
    """The naive ``wall`` as that wall-clock time in ``zone`` (aware, with the zone's offset
    then, by Python's rules of the zone in any year); None when it names no one instant: the
    zone's clocks skip it or pass it twice."""
    first = wall.replace(tzinfo=zone)
    return first if first.utcoffset() == wall.replace(tzinfo=zone, fold=1).utcoffset() else None


def parse_instant(value: str, field: str = "due_at") -> int:
    """An RFC 3339 time with an offset as UTC milliseconds; a naive time is refused."""
    if not _RFC3339.match(value.strip()):
        raise ValidationError(
            field,
            f"{value!r} is not an RFC 3339 time with an offset "
            "(e.g. 2026-01-01T09:00:00Z); naive times are refused",
        )
    try:
        instant = datetime.fromisoformat(value.strip().replace("z", "Z").replace("Z", "+00:00"))
    except ValueError as exc:
        raise ValidationError(field, f"{value!r}: {exc}") from exc
    ms = to_ms(instant)
    if not MIN_INSTANT_MS <= ms <= MAX_DUE_MS:  # in UTC: an offset can cross either end
        raise ValidationError(field, f"{value!r} is outside years 1 to 9999 in UTC")
    return ms


def payload_of(body: ScheduleIn | ScheduleChange | RecurringChange, *,
               max_payload: int) -> tuple[PayloadKind, bytes] | None:
    """The one payload a body gives (None when it gives none); more than one is an error."""
    given = [n for n in ("payload", "payload_text", "payload_base64")
             if n in body.model_fields_set and (n == "payload" or getattr(body, n) is not None)]
    if len(given) > 1:
        raise ValidationError("payload", "give exactly one of payload, payload_text, "
                                         f"payload_base64 (got {len(given)})")
    if not given:
        return None
    field = given[0]
    if field == "payload":
        try:
            kind, data = PayloadKind.JSON, compact_json(body.payload)
        except ValueError as exc:
            raise ValidationError("payload", f"not valid JSON: {exc}") from exc
    elif field == "payload_text":
        try:
            kind, data = PayloadKind.TEXT, str(body.payload_text).encode()
        except UnicodeEncodeError as exc:
            raise ValidationError("payload_text", f"not valid Unicode text: {exc}") from exc
    else:
        try:
            kind = PayloadKind.BINARY
            data = base64.b64decode(str(body.payload_base64), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValidationError("payload_base64", f"not valid base64: {exc}") from exc
    if len(data) > max_payload:
        raise ValidationError(field, f"payload is {len(data)} bytes; the limit is {max_payload}")
    return kind, data


def header_bytes(headers: Mapping[str, str]) -> int:
    """The size of ``headers`` that counts against a message's limit: names and values, as
    UTF-8."""
    return sum(len(k.encode("utf-8", "surrogatepass"))
               + len(v.encode("utf-8", "surrogatepass")) for k, v in headers.items())


def check_message_size(payload: bytes, headers: Mapping[str, str], *, limit: int,
                       size: int | None = None) -> None:
    """Refuse a message whose payload and headers (names and values, as UTF-8) together pass
    ``limit``: a header is carried with every delivery just like the payload. ``size``: the
    headers' :func:`header_bytes`, when known (an import's rows mostly share a few)."""
    counted = header_bytes(headers) if size is None else size
    if counted and len(payload) + counted > limit:
        raise ValidationError("headers", f"payload ({len(payload)} bytes) and headers "
                                         f"({counted} bytes) come to "
                                         f"{len(payload) + counted} bytes; the limit is "
                                         f"{limit}")


def due_of(due_at: str | None, delay: float | str | None, *, now_ms: int,
           grace_ms: int) -> int | None:
    """The due time given by ``due_at`` or ``delay`` (None when neither; both is an error)."""
    if due_at is not None and delay is not None:
        raise ValidationError("due_at", "give exactly one of due_at or delay")
    if due_at is not None:
        due_ms = parse_instant(due_at)
        if due_ms > MAX_DUE_MS:
            raise ValidationError("due_at", f"{due_at!r} is after year 9999")
        if due_ms < now_ms - grace_ms:
            raise ValidationError("due_at", f"{(now_ms - due_ms) / 1000:.3f} s in the past; "
                                            f"the grace window is {grace_ms / 1000:g} s")
        return due_ms
    if delay is not None:
        due_ms = now_ms + parse_duration(delay) // timedelta(milliseconds=1)
        if due_ms > MAX_DUE_MS:
            raise ValidationError("delay", f"{delay!r} is too long: the latest due time is "
                                           "year 9999")
        return due_ms
    return None



"""The HTTP edge's models: requests validated here, once, into the domain's values."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import math
import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from tocsin.clock import from_ms, to_ms
from tocsin.domain import NewSchedule, PayloadKind, Schedule
from tocsin.domain.schedule import payload_value
from tocsin.errors import ValidationError

__all__ = [
    "MAX_DUE_MS",
    "ChannelIn",
    "ScheduleBatchIn",
    "ScheduleChange",
    "ScheduleIn",
    "canonical_digest",
    "due_of",
    "parse_duration",
    "payload_of",
    "schedule_out",
]

_ISO_DURATION = re.compile(
    r"^P(?:(?P<w>\d+(?:\.\d+)?)W)?(?:(?P<d>\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)
_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([Zz]|[+-]\d{2}:\d{2})$")
_KEY_MAX = 256
MAX_DUE_MS = 253_402_300_799_999
"""The latest due time accepted: 9999-12-31T23:59:59.999Z."""


def _no_bool(value: Any) -> Any:
    """Refuse JSON ``true``/``false`` where a number is meant (pydantic would read 1 or 0)."""
    if isinstance(value, bool):
        raise ValueError("must be a number of seconds or an ISO 8601 duration, not a boolean")
    return value


Delay = Annotated[float | str | None, BeforeValidator(_no_bool)]
"""A delay: seconds, or an ISO 8601 duration; never a boolean."""


def canonical_digest(value: Any) -> str:
    """SHA-256 of ``value`` as canonical JSON (sorted keys, no spaces): two requests that differ
    only in key order or spacing get the same digest."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False,
                      allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


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
    return to_ms(instant)


class ScheduleIn(BaseModel):
    """One schedule as a client sends it."""

    model_config = ConfigDict(extra="forbid")

    channel: str = Field(min_length=1, max_length=128)
    payload: JsonValue = None
    payload_text: str | None = None
    payload_base64: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    due_at: str | None = Field(None, description="RFC 3339 with an offset.")
    delay: Delay = Field(None, description="Seconds or an ISO 8601 duration.")
    key: str | None = Field(None, min_length=1, max_length=_KEY_MAX)
    tenant: str = Field("default", min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._-]+$")
    ordering_key: str | None = Field(None, min_length=1, max_length=_KEY_MAX)
    uniqueness_key: str | None = Field(
        None, min_length=1, max_length=_KEY_MAX,
        description="Makes the task key (ordering_key, due time, uniqueness_key).")
    key_mode: Literal["idempotent", "task"] = Field(
        "idempotent", description="idempotent: a repeat with another body is 409; task: a "
                                  "repeat overwrites while pending.")

    def to_domain(self, *, now_ms: int, max_payload: int, grace_ms: int,
                  key_retention_ms: int = 7 * 86_400_000) -> NewSchedule:
        """Validate the cross-field rules and build the domain value."""
        payload = payload_of(self, max_payload=max_payload)
        if payload is None:
            raise ValidationError("payload", "give exactly one of payload, payload_text, "
                                             "payload_base64 (got none)")
        kind, data = payload
        due_ms = due_of(self.due_at, self.delay, now_ms=now_ms, grace_ms=grace_ms)
        if due_ms is None:
            raise ValidationError("due_at", "give exactly one of due_at or delay")
        key, task = self.key, self.key_mode == "task"
        if self.uniqueness_key is not None:
            if key is not None:
                raise ValidationError("uniqueness_key", "give key or uniqueness_key, not both")
            key, task = f"task:{self.ordering_key or ''}:{due_ms}:{self.uniqueness_key}", True
        digest = canonical_digest(self.model_dump(mode="json"))
        return NewSchedule(
            channel=self.channel, payload=data, payload_kind=kind, headers=self.headers,
            due_ms=due_ms, tenant=self.tenant, key=key, ordering_key=self.ordering_key,
            overwrite_pending=task, key_retention_ms=key_retention_ms, request_digest=digest,
        )


class ScheduleChange(BaseModel):
    """A PATCH of a PENDING schedule: any of a new due time, payload or headers."""

    model_config = ConfigDict(extra="forbid")

    payload: JsonValue = None
    payload_text: str | None = None
    payload_base64: str | None = None
    headers: dict[str, str] | None = None
    due_at: str | None = Field(None, description="RFC 3339 with an offset.")
    delay: Delay = Field(None, description="Seconds or an ISO 8601 duration.")


class ScheduleBatchIn(BaseModel):
    """A batch: every schedule is stored, or none (for the OpenAPI description)."""

    schedules: list[ScheduleIn] = Field(min_length=1)


def payload_of(body: ScheduleIn | ScheduleChange, *,
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
            text = json.dumps(body.payload, separators=(",", ":"), allow_nan=False)
        except ValueError as exc:
            raise ValidationError("payload", f"not valid JSON: {exc}") from exc
        kind, data = PayloadKind.JSON, text.encode()
    elif field == "payload_text":
        kind, data = PayloadKind.TEXT, str(body.payload_text).encode()
    else:
        try:
            kind = PayloadKind.BINARY
            data = base64.b64decode(str(body.payload_base64), validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValidationError("payload_base64", f"not valid base64: {exc}") from exc
    if len(data) > max_payload:
        raise ValidationError(field, f"payload is {len(data)} bytes; the limit is {max_payload}")
    return kind, data


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


class ChannelIn(BaseModel):
    """A channel registration."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    kind: str
    config: dict[str, Any] = Field(default_factory=dict)


def iso(ms: int | None) -> str | None:
    """UTC milliseconds as RFC 3339 with ``Z``."""
    return (
        None
        if ms is None
        else from_ms(ms).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def schedule_out(s: Schedule, *, full: bool = True) -> dict[str, Any]:
    """A schedule as the API answers it."""
    out: dict[str, Any] = {
        "id": s.id,
        "status": s.status.value,
        "due_at": iso(s.due_ms),
        "bucket": s.bucket,
    }
    if full:
        out.update(
            {
                "tenant": s.tenant,
                "channel": s.channel,
                "created_at": iso(s.created_ms),
                "attempts": s.attempts,
                "last_error": s.last_error,
                "next_attempt_at": iso(s.next_ms) if s.status.value == "PENDING" else None,
                "delivered_at": iso(s.delivered_ms),
                "lateness_ms": s.lateness_ms,
                "headers": s.headers,
                "key": s.key,
                "ordering_key": s.ordering_key,
                **payload_value(s.payload_kind, s.payload),
            }
        )
        if s.payload_kind is PayloadKind.TEXT:
            out["payload_text"] = out.pop("payload")
    return out

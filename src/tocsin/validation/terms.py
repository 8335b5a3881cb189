"""A schedule's delivery terms at the edge: ``expires_at``, ``max_lateness``, ``retry``,
``body``, ``method`` and ``path``, as
the API, the import and the commands topic take them for a schedule (and a recurring one), and
as a channel's ``config`` gives their defaults (``max_lateness``, ``retry``)."""

from __future__ import annotations

from typing import Annotated, Any

import pydantic
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

from tocsin.domain.channel import retry_terms_of
from tocsin.domain.retry import RetryTerms
from tocsin.domain.terms import BodyFormat, Terms, WebhookMethod
from tocsin.errors import ValidationError
from tocsin.validation.parsing import parse_duration, parse_instant

__all__ = ["TERMS_FIELDS", "RetryIn", "check_channel_terms", "retry_terms", "terms_from"]

TERMS_FIELDS = ("expires_at", "max_lateness", "retry", "body", "method", "path")
"""The request fields that make a schedule's :class:`~tocsin.domain.terms.Terms`."""
_MAX_ATTEMPTS = 1000
_MAX_MULTIPLIER = 10.0


def _no_bool(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError("must be a number of seconds or an ISO 8601 duration, not a boolean")
    return value


_Duration = Annotated[float | str | None, BeforeValidator(_no_bool)]


class RetryIn(BaseModel):
    """A retry policy's overrides; what is not given is the channel's, else the settings'."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int | None = Field(None, ge=1, le=_MAX_ATTEMPTS,
                                     description="Attempts before the schedule is dead.")
    base: _Duration = Field(None, description="The first retry's back-off ceiling (seconds or "
                                              "ISO 8601 duration).")
    cap: _Duration = Field(None, description="The longest back-off (seconds or ISO 8601 "
                                             "duration).")
    multiplier: float | None = Field(None, ge=1, le=_MAX_MULTIPLIER,
                                     description="How much the ceiling grows per retry "
                                                 "(default 2).")
    jitter: float | None = Field(None, ge=0, le=1,
                                 description="The share of the ceiling drawn at random: the "
                                             "wait is in [d*(1-jitter), d] (default 0.5).")
    max_retry_duration: _Duration = Field(
        None, description="No retry later than this long after the first attempt (seconds or "
                          "ISO 8601 duration).")


def _positive_ms(value: float | str, field: str) -> int:
    ms = int(parse_duration(value, field).total_seconds() * 1000)
    if ms <= 0:
        raise ValidationError(field, "must be more than 0")
    return ms


def retry_terms(given: RetryIn, field: str = "retry") -> RetryTerms:
    """``given`` as :class:`RetryTerms` (durations in ms), or ValidationError naming the
    field (``retry.cap``...)."""
    base = None if given.base is None else _positive_ms(given.base, f"{field}.base")
    cap = None if given.cap is None else _positive_ms(given.cap, f"{field}.cap")
    if base is not None and cap is not None and cap < base:
        raise ValidationError(f"{field}.cap", "must not be less than base")
    longest = (None if given.max_retry_duration is None
               else _positive_ms(given.max_retry_duration, f"{field}.max_retry_duration"))
    return RetryTerms(max_attempts=given.max_attempts, base_ms=base, cap_ms=cap,
                      multiplier=given.multiplier, jitter=given.jitter,
                      max_duration_ms=longest)


MAX_PATH = 2048
"""The longest ``path`` a schedule may append to its webhook's URL."""


def check_path(path: str) -> str:
    """A schedule's ``path``: a path and query appended to its webhook channel's URL, so it
    starts with ``/`` or ``?`` (never ``//``: that would name another host), and holds no
    fragment, backslash, space or control character."""
    if not path.startswith(("/", "?")) or path.startswith("//"):
        raise ValidationError("path", "must start with '/' or '?' (not '//'): it is appended "
                                      "to the channel's URL, whose origin it keeps")
    if len(path) > MAX_PATH:
        raise ValidationError("path", f"is longer than {MAX_PATH} characters")
    if any(c in path for c in "#\\") or any(ord(c) <= 32 or ord(c) == 127 for c in path):
        raise ValidationError("path", "holds a '#', a backslash, a space or a control "
                                      "character")
    return path


def terms_from(*, expires_at: str | None, max_lateness: float | str | None,
               retry: RetryIn | None, due_ms: int | None, body: BodyFormat | None = None,
               method: WebhookMethod | None = None, path: str | None = None) -> Terms | None:
    """The terms these fields ask (None: none), or ValidationError naming the field.
    ``due_ms``: the schedule's due time (None for a recurring schedule), which its
    ``expires_at`` must come after."""
    if (expires_at is None and max_lateness is None and retry is None and body is None
            and method is None and path is None):
        return None
    expires = None if expires_at is None else parse_instant(expires_at, "expires_at")
    if expires is not None and due_ms is not None and expires <= due_ms:
        raise ValidationError("expires_at", "must be after the due time")
    lateness = None if max_lateness is None else _positive_ms(max_lateness, "max_lateness")
    terms = Terms(expires_ms=expires, max_lateness_ms=lateness,
                  retry=None if retry is None else retry_terms(retry), body=body,
                  method=method, path=None if path is None else check_path(path))
    return None if terms.empty else terms


def check_channel_terms(config: dict[str, Any]) -> None:
    """A channel's ``max_lateness`` (seconds) and ``retry`` (durations in seconds), or
    ValidationError naming ``config.<x>``."""
    lateness = config.get("max_lateness")
    if lateness is not None and (isinstance(lateness, bool)
                                 or not isinstance(lateness, int | float) or lateness <= 0):
        raise ValidationError("config.max_lateness", "must be a number of seconds above 0")
    retry = config.get("retry")
    if retry is None:
        return
    if not isinstance(retry, dict):
        raise ValidationError("config.retry", "must be an object")
    for name in ("base", "cap", "max_retry_duration"):
        value = retry.get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise ValidationError(f"config.retry.{name}", "must be a number of seconds")
    try:
        given = RetryIn.model_validate(retry)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        raise ValidationError("config.retry." + ".".join(map(str, first["loc"])),
                              str(first.get("msg", "invalid")).removeprefix("Value error, "),
                              ) from None
    retry_terms(given, "config.retry")
    retry_terms_of(retry)

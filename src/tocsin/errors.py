"""Tocsin's error tree.

Every error Tocsin raises on purpose derives from :class:`TocsinError`::

    TocsinError
    ├── ValidationError        bad input: names the field and the reason (HTTP 422)
    │   ├── TooLargeError      a request body over the size limit (HTTP 413)
    │   └── MediaTypeError     a request body that is not JSON (HTTP 415)
    ├── NotFoundError          no such schedule, channel, policy... (HTTP 404)
    ├── ConflictError          the state forbids it: too late to cancel, key reused (HTTP 409)
    ├── StoreError             the system of record failed or is unreachable (HTTP 503)
    ├── AuthenticationError    no API key, or an unknown or revoked one (HTTP 401)
    ├── ForbiddenError         the key may not do this: names the field and the reason (HTTP 403)
    └── QuotaExceededError     a tenant's cap is reached; says when to retry (HTTP 429)

A failed delivery is no exception: a channel answers each envelope with a
:class:`~tocsin.domain.Result` whose outcome says retry (transient) or rejected (permanent).

Each class maps to one HTTP status in :data:`HTTP_STATUS`, in this module, so the API
(``tocsin.api.errors``) and the client (``tocsin.client``) share one table: the API answers
:func:`error_body` with :func:`status_of`, the client turns it back with :func:`error_from`.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "HTTP_STATUS",
    "AuthenticationError",
    "ConflictError",
    "ForbiddenError",
    "MediaTypeError",
    "NotFoundError",
    "QuotaExceededError",
    "StoreError",
    "TocsinError",
    "TooLargeError",
    "ValidationError",
    "error_body",
    "error_from",
    "first_line",
    "status_of",
]


class TocsinError(Exception):
    """Root of every error Tocsin raises on purpose."""


class ValidationError(TocsinError):
    """Input that cannot be accepted; ``field`` names where, the message says why."""

    def __init__(self, field: str, reason: str, *, errors: list[dict[str, Any]] | None = None):
        self.field = field
        self.reason = reason
        self.errors = errors or [{"field": field, "reason": reason}]
        super().__init__(f"{field}: {reason}")


class TooLargeError(ValidationError):
    """A request body larger than the configured limit; refused before it is read whole."""


class MediaTypeError(ValidationError):
    """A request body whose ``Content-Type`` is not JSON."""


class NotFoundError(TocsinError):
    """The named object does not exist."""

    def __init__(self, kind: str, ident: str):
        self.kind = kind
        self.ident = ident
        super().__init__(f"{kind} {ident!r} not found")


class ConflictError(TocsinError):
    """The object's current state forbids the request; ``status`` is that state when known."""

    def __init__(self, message: str, *, status: str | None = None, ident: str | None = None):
        self.status = status
        self.ident = ident
        super().__init__(message)


class StoreError(TocsinError):
    """The store failed or could not be reached."""


class AuthenticationError(TocsinError):
    """The request carries no API key, or one that is unknown or revoked."""


class ForbiddenError(TocsinError):
    """The caller's key may not do this; ``field`` names what it may not touch."""

    def __init__(self, field: str, reason: str):
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


class QuotaExceededError(TocsinError):
    """A tenant's cap is reached; ``retry_after_s`` says when trying again may succeed."""

    def __init__(self, message: str, *, retry_after_s: int):
        self.retry_after_s = retry_after_s
        super().__init__(message)


HTTP_STATUS: dict[type[TocsinError], int] = {
    ValidationError: 422,
    TooLargeError: 413,
    MediaTypeError: 415,
    NotFoundError: 404,
    ConflictError: 409,
    StoreError: 503,
    AuthenticationError: 401,
    ForbiddenError: 403,
    QuotaExceededError: 429,
}
"""The one status of each error class; any other :class:`TocsinError` is a 500."""


def status_of(exc: TocsinError) -> int:
    """The HTTP status for an error (its nearest class in :data:`HTTP_STATUS`)."""
    for cls in type(exc).__mro__:
        if cls in HTTP_STATUS:
            return HTTP_STATUS[cls]
    return 500


def error_body(exc: TocsinError) -> dict[str, Any]:
    """The JSON body the API answers for an error: ``{"error": {"type", "message", ...}}``."""
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ValidationError):
        body.update(field=exc.field, reason=exc.reason, errors=exc.errors)
    if isinstance(exc, ConflictError):
        body.update(status=exc.status, id=exc.ident)
    if isinstance(exc, NotFoundError):
        body.update(kind=exc.kind, id=exc.ident)
    if isinstance(exc, ForbiddenError):
        body.update(field=exc.field, reason=exc.reason)
    if isinstance(exc, QuotaExceededError):
        body.update(retry_after=exc.retry_after_s)
    return {"error": body}


def error_from(status: int, body: Any, *, path: str, text: str = "") -> TocsinError:
    """The error an HTTP answer stands for: the inverse of :func:`status_of` and
    :func:`error_body` (``path`` names what a bare 404 was about; ``text`` is the raw answer,
    quoted when it is not Tocsin's JSON)."""
    try:
        error = body["error"]
        message = str(error["message"])
    except (KeyError, TypeError):
        return TocsinError(f"HTTP {status}: {text[:500]}")
    cls = next((c for c, s in HTTP_STATUS.items() if s == status), None)
    if cls is not None and issubclass(cls, ValidationError):
        return cls(error.get("field", "body"), error.get("reason", message),
                   errors=error.get("errors"))
    if cls is NotFoundError:
        return NotFoundError(error.get("kind", "path"), error.get("id", path))
    if cls is ConflictError:
        return ConflictError(message, status=error.get("status"), ident=error.get("id"))
    if cls is ForbiddenError:
        return ForbiddenError(error.get("field", "key"), error.get("reason", message))
    if cls is QuotaExceededError:
        retry = error.get("retry_after")
        return QuotaExceededError(message, retry_after_s=retry if isinstance(retry, int) else 1)
    if cls is not None:
        return cls(message)
    return TocsinError(f"HTTP {status}: {message}")


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class's name when it has none: the reason
    to quote from a foreign error (Spark's run on for pages of plan and stack)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__

"""Tocsin's error tree.

Every error Tocsin raises on purpose derives from :class:`TocsinError`::

    TocsinError
    ├── ValidationError        bad input: names the field and the reason (HTTP 422)
    ├── NotFoundError          no such schedule, channel, policy... (HTTP 404)
    ├── ConflictError          the state forbids it: too late to cancel, key reused (HTTP 409)
    ├── StoreError             the system of record failed or is unreachable (HTTP 503)
    ├── AuthenticationError    no API key, or an unknown or revoked one (HTTP 401)
    ├── ForbiddenError         the key may not do this: names the field and the reason (HTTP 403)
    ├── QuotaExceededError     a tenant's cap is reached; says when to retry (HTTP 429)
    └── ChannelError           a delivery failed
        ├── ChannelUnavailable transient: retried with back-off
        └── ChannelRejected    permanent: the schedule is dead-lettered at once

The HTTP layer maps each class to one status code in ``tocsin.api.errors``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AuthenticationError",
    "ChannelError",
    "ChannelRejected",
    "ChannelUnavailable",
    "ConflictError",
    "ForbiddenError",
    "NotFoundError",
    "QuotaExceededError",
    "StoreError",
    "TocsinError",
    "ValidationError",
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


class ChannelError(TocsinError):
    """A delivery to a channel failed."""


class ChannelUnavailable(ChannelError):
    """A transient failure (timeout, 5xx, broker down): the delivery is retried."""


class ChannelRejected(ChannelError):
    """A permanent refusal (4xx, invalid message): retrying cannot help."""

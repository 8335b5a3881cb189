"""Tocsin's error tree.

Every error Tocsin raises on purpose derives from :class:`TocsinError`::

    TocsinError
    ├── ValidationError        bad input: names the field and the reason (HTTP 422)
    │   ├── TooLargeError      a request body over the size limit (HTTP 413)
    │   └── MediaTypeError     a request body that is not JSON (HTTP 415)
    ├── NotFoundError          no such schedule, channel, policy... (HTTP 404)
    ├── ConflictError          the state forbids it: too late to cancel, key reused (HTTP 409)
    ├── StoreError             the system of record failed or is unreachable (HTTP 503)
    └── ChannelError           a delivery failed
        ├── ChannelUnavailable transient: retried with back-off
        └── ChannelRejected    permanent: the schedule is dead-lettered at once

The HTTP layer maps each class to one status code in ``tocsin.api.errors``.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "ChannelError",
    "ChannelRejected",
    "ChannelUnavailable",
    "ConflictError",
    "MediaTypeError",
    "NotFoundError",
    "StoreError",
    "TocsinError",
    "TooLargeError",
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


class ChannelError(TocsinError):
    """A delivery to a channel failed."""


class ChannelUnavailable(ChannelError):
    """A transient failure (timeout, 5xx, broker down): the delivery is retried."""


class ChannelRejected(ChannelError):
    """A permanent refusal (4xx, invalid message): retrying cannot help."""

"""The audit log's entry: one change made through the API or the dashboard."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

__all__ = ["AuditEntry", "audit_id"]


def audit_id(at_ms: int) -> str:
    """A fresh entry id that sorts by time (``aud_<ms>_<random>``)."""
    return f"aud_{at_ms:013d}_{secrets.token_hex(4)}"


@dataclass(frozen=True, kw_only=True, slots=True)
class AuditEntry:
    """Who changed what, when and from where. No request body is kept (it may hold a
    secret): ``target`` is the path acted on, ``detail`` the answer's id, name or count."""

    id: str
    at_ms: int
    key_id: str | None
    """The key the change was made with (None: the API could not tell)."""
    key_tenant: str | None
    """The key's tenant; None for an admin key."""
    tenant: str | None
    """The tenant acted in, when the change names one."""
    action: str
    """The method and route, as ``POST /v1/channels`` or ``POST /ui/dead/redrive``."""
    target: str
    """The path acted on (``/v1/channels/out``)."""
    status: int
    """The answer's HTTP status."""
    client: str | None = None
    """The client's address, as the server saw it."""
    detail: str | None = None
    """What the answer named: an id, a name, a count."""

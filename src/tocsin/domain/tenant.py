"""Tenants: how durably each tenant's schedules are written."""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple

from tocsin.errors import ValidationError

__all__ = ["DEFAULT_TENANT", "TENANT_NAME", "Durability", "Tenant", "check_tenant"]

DEFAULT_TENANT = "default"
"""The tenant of whatever names none."""

TENANT_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}"
"""What a tenant name may be: 1 to 64 letters, digits, '.', '_' or '-', starting with a letter
or digit — so never ``.`` or ``..``: a tenant's name is a directory below the file and
credential roots (``tenants/<tenant>/``). Written so that Python (``fullmatch``), pydantic and
RE2 (Arrow, anchored with ``^…$``) read it alike."""
_TENANT = re.compile(TENANT_NAME)


def check_tenant(name: object, field: str = "tenant") -> str:
    """``name`` when it is a tenant name (:data:`TENANT_NAME`), else ValidationError naming
    ``field``."""
    if type(name) is not str or _TENANT.fullmatch(name) is None:
        raise ValidationError(field, f"{name!r} is not a tenant name: 1 to 64 letters, digits, "
                                     "'.', '_' or '-', starting with a letter or digit")
    return name


class Durability(StrEnum):
    """How a tenant's creates are committed.

    ``strict`` (the default, for every tenant not configured otherwise): the commit returns
    once the write is on disk — PostgreSQL ``synchronous_commit = on``, SQLite ``synchronous =
    FULL``. ``relaxed``: the commit returns before the flush — PostgreSQL ``synchronous_commit =
    off`` (a server crash may lose the last few hundred milliseconds of acknowledged creates;
    the database stays consistent), SQLite ``synchronous = NORMAL`` in WAL mode (a power loss,
    not a process crash, may lose the last commits). Relaxed buys commit latency and, with
    small batches, throughput.
    """

    STRICT = "strict"
    RELAXED = "relaxed"


class Tenant(NamedTuple):
    """A tenant's settings."""

    name: str
    durability: Durability = Durability.STRICT
    configured: bool = True
    """False for a tenant nobody configured: it has the defaults."""
    weight: int = 1
    """The tenant's share of the dispatcher's room while other tenants have work due: each of
    its destinations' lanes holds ``weight`` times the room of a tenant of weight 1 before its
    further schedules wait (equal shares by default)."""
    events: str | None = None
    """The channel (of this tenant) that gets the outcome events of every channel of the
    tenant that names no ``events`` channel of its own."""

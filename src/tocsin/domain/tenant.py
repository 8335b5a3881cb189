"""Tenants: how durably each tenant's schedules are written."""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

__all__ = ["DEFAULT_TENANT", "Durability", "Tenant"]

DEFAULT_TENANT = "default"
"""The tenant of whatever names none."""


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

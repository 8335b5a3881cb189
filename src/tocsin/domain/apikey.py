"""API keys: who is calling, and what they may do.

A key is shown once, when it is created, as ``tsk_<key id>_<secret>``; the store keeps only the
SHA-256 digest of the whole token, so a stolen database does not hand out working keys.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from tocsin.errors import ValidationError

__all__ = ["ApiKey", "Role"]


class Role(StrEnum):
    """What a key may reach."""

    ADMIN = "admin"
    """Every tenant (it may name one on any request), tenant settings and key management."""
    TENANT = "tenant"
    """One tenant's schedules, channels, recurring rules, policies and deliveries, nothing else."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ApiKey:
    """A stored API key: its public id, its scope and the digest of its secret."""

    id: str
    """The public part (``key_…``), safe to show and log."""
    role: Role
    tenant: str | None
    """The tenant a ``tenant`` key is bound to; None for an ``admin`` key."""
    read_only: bool = False
    """True: only GET (and HEAD) requests."""
    name: str | None = None
    """A label for people (``ci-deployer``)."""
    digest: str
    """Hex SHA-256 of the whole token."""
    created_ms: int
    revoked_ms: int | None = None

    def __post_init__(self) -> None:
        if self.role is Role.TENANT and not self.tenant:
            raise ValidationError("tenant", "a tenant key names its tenant")
        if self.role is Role.ADMIN and self.tenant is not None:
            raise ValidationError("tenant", "an admin key is not bound to a tenant")

    @property
    def active(self) -> bool:
        """False once revoked."""
        return self.revoked_ms is None

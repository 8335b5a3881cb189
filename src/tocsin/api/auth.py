"""Who is calling, and which tenant a request reads or writes.

Every ``/v1`` route depends on :func:`authenticate` (set on the routers in
:mod:`tocsin.api.app`): ``Authorization: Bearer <token>`` names an active key, or the answer
is 401; a read-only key gets 403 on anything but GET and HEAD. Routes then ask:

- :func:`scope` for reads: the tenant a read is limited to (None = every tenant, admin only);
- :func:`tenant_for` for writes and for names (channels, policies, ordering keys live in a
  tenant's namespace): the one tenant the request acts in;
- :func:`require_admin` for what only an admin may do (tenant settings, keys).

The tenant comes from the key, never from the body: a tenant key that names another tenant
(in the body or in ``?tenant=``) gets 403 naming the field ``tenant``; an admin key may name
any tenant, and acts in ``default`` when it names none. Another tenant's object answers 404,
exactly like a missing one (the store sees to that).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Query, Request

from tocsin.api.deps import Deps
from tocsin.api.gate import gate_key
from tocsin.apikeys.tokens import find_key
from tocsin.domain import DEFAULT_TENANT, Role
from tocsin.errors import AuthenticationError, ForbiddenError
from tocsin.validation.models import TENANT_PATTERN

__all__ = ["Principal", "authenticate", "principal", "require_admin",
           "scope", "tenant_for"]

_READS = frozenset({"GET", "HEAD"})


@dataclass(frozen=True, kw_only=True, slots=True)
class Principal:
    """The caller, as its key says."""

    key_id: str
    role: Role
    tenant: str | None
    """The tenant of a ``tenant`` key; None for an admin key."""
    read_only: bool

    @property
    def admin(self) -> bool:
        """True for an admin key."""
        return self.role is Role.ADMIN


TenantQuery = Annotated[str | None, Query(
    min_length=1, max_length=64, pattern=TENANT_PATTERN,
    description="Admin keys: the tenant to act in or to list (default: `default` for writes "
                "and names, every tenant for lists). A tenant key may name only its own.")]


def _bearer(request: Request) -> str:
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise AuthenticationError("no API key: send Authorization: Bearer <key>")
    return token.strip()


def authenticate(request: Request, tenant: TenantQuery = None) -> Principal:
    """The caller's :class:`Principal` (also kept as ``request.state.principal``)."""
    key = gate_key(request.scope) or find_key(Deps.of(request).store, _bearer(request))
    if key is None:
        raise AuthenticationError("unknown or revoked API key")
    caller = Principal(key_id=key.id, role=key.role, tenant=key.tenant,
                       read_only=key.read_only)
    request.state.principal = caller
    if caller.read_only and request.method not in _READS:
        raise ForbiddenError("method", f"key {key.id} is read-only: {request.method} is not "
                                       "allowed")
    if tenant is not None:
        tenant_for(request, tenant)
    return caller


def principal(request: Request) -> Principal:
    """The caller of a request that passed :func:`authenticate`."""
    caller: Principal = request.state.principal
    return caller


def scope(request: Request) -> str | None:
    """The tenant a read is limited to: a tenant key's own; for an admin, ``?tenant=`` when
    given, else None (every tenant)."""
    caller = principal(request)
    if not caller.admin:
        return caller.tenant
    return request.query_params.get("tenant") or None


def tenant_for(request: Request, named: str | None = None) -> str:
    """The tenant a write (or a name) belongs to: a tenant key's own (naming another is 403
    on the field ``tenant``); for an admin, ``named``, else ``?tenant=``, else ``default``."""
    caller = principal(request)
    if caller.tenant is not None:
        if named is not None and named != caller.tenant:
            raise ForbiddenError("tenant", f"this key acts for tenant {caller.tenant!r} only, "
                                           f"not {named!r}")
        return caller.tenant
    return named or request.query_params.get("tenant") or DEFAULT_TENANT


def require_admin(request: Request) -> None:
    """403 unless the caller holds an admin key."""
    if not principal(request).admin:
        raise ForbiddenError("key", "only an admin key may do this")

"""API keys: minting, hashing and finding them (the value is :class:`tocsin.domain.ApiKey`).

A token is ``tsk_<key id>_<secret>``: the key id (``key_`` and 16 hex digits) is public and
lets people tell keys apart in lists and logs; the secret is 256 random bits from
:mod:`secrets`. The store keeps only the SHA-256 digest of the whole token. A plain (fast) hash
is enough because the secret is random and long: a slow password hash protects guessable
secrets, and there is nothing here to guess.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from typing import Any

from tocsin.abc import Store
from tocsin.clock import iso_ms
from tocsin.domain import ApiKey, Role, check_tenant

__all__ = ["describe", "digest_of", "find_key", "issue_key", "new_token"]

_SECRET_BYTES = 32
"""256 bits."""
TOKEN = re.compile(r"tsk_(key_[0-9a-f]{16})_[0-9a-f]{64}")
"""The shape of every token this module mints."""


def new_token() -> tuple[str, str]:
    """A fresh (key id, token) pair."""
    key_id = f"key_{secrets.token_hex(8)}"
    return key_id, f"tsk_{key_id}_{secrets.token_hex(_SECRET_BYTES)}"


def digest_of(token: str) -> str:
    """The hex SHA-256 of a token: what the store keeps and looks keys up by."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def issue_key(store: Store, *, role: Role, tenant: str | None = None, read_only: bool = False,
              name: str | None = None, now_ms: int) -> tuple[ApiKey, str]:
    """Mint a key, store its digest, and return it with its token (the only time the token
    exists outside the caller's hands). ``tenant`` must be a tenant name
    (:data:`~tocsin.domain.TENANT_NAME`): whatever the way in (the API, ``--local``)."""
    if tenant is not None:
        check_tenant(tenant)
    key_id, token = new_token()
    key = ApiKey(id=key_id, role=role, tenant=tenant, read_only=read_only, name=name,
                 digest=digest_of(token), created_ms=now_ms)
    return store.put_key(key), token


def find_key(store: Store, token: str) -> ApiKey | None:
    """The active key ``token`` stands for, or None (malformed, unknown or revoked).

    The lookup is by digest, so what a timing difference could reveal is a prefix of a
    digest, which does not help forge a token; the final comparison is constant-time all
    the same."""
    if TOKEN.fullmatch(token) is None:
        return None
    digest = digest_of(token)
    key = store.key_by_digest(digest)
    if key is None or not hmac.compare_digest(key.digest, digest) or not key.active:
        return None
    return key


def describe(key: ApiKey) -> dict[str, Any]:
    """A key as the API and the CLI show it: never the digest, never the token."""
    return {"id": key.id, "role": key.role.value, "tenant": key.tenant,
            "read_only": key.read_only, "name": key.name, "created_at": iso_ms(key.created_ms),
            "revoked_at": None if key.revoked_ms is None else iso_ms(key.revoked_ms)}

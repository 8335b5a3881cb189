"""API keys in the store (:class:`~tocsin.abc.KeyStore`), on every backend."""

from __future__ import annotations

import pytest

from tocsin.abc import Store
from tocsin.domain import ApiKey, Role
from tocsin.errors import ConflictError, NotFoundError

NOW = 1_700_000_000_000


def _key(key_id: str, digest: str, **fields: object) -> ApiKey:
    fields.setdefault("role", Role.TENANT)
    fields.setdefault("tenant", "a")
    return ApiKey(id=key_id, digest=digest, created_ms=NOW, **fields)  # type: ignore[arg-type]


def test_put_find_list_revoke(store: Store) -> None:
    admin = _key("key_admin", "d0", role=Role.ADMIN, tenant=None, name="local")
    reader = _key("key_r", "d1", read_only=True)
    other = _key("key_b", "d2", tenant="b")
    for key in (admin, reader, other):
        assert store.put_key(key) == key
    assert store.key_by_digest("d1") == reader
    assert store.key_by_digest("d0") == admin
    assert store.key_by_digest("nope") is None
    assert store.list_keys() == [admin, other, reader]  # oldest first, then by id
    assert store.list_keys(tenant="b") == [other]
    revoked = store.revoke_key("key_r", now_ms=NOW + 5)
    assert revoked.revoked_ms == NOW + 5 and not revoked.active
    assert store.revoke_key("key_r", now_ms=NOW + 9).revoked_ms == NOW + 5  # the first stays
    assert store.key_by_digest("d1") == revoked
    with pytest.raises(NotFoundError):
        store.revoke_key("key_absent", now_ms=NOW)


def test_an_id_or_digest_is_never_reused(store: Store) -> None:
    store.put_key(_key("key_1", "d1"))
    with pytest.raises(ConflictError):
        store.put_key(_key("key_1", "d2"))
    with pytest.raises(ConflictError):
        store.put_key(_key("key_2", "d1"))
    assert [k.id for k in store.list_keys()] == ["key_1"]

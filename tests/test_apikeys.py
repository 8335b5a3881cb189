"""Minting and finding API keys: random, stored as digests, revocable."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from tocsin.abc import Store
from tocsin.apikeys.tokens import TOKEN, describe, digest_of, find_key, issue_key, new_token
from tocsin.domain import Role
from tocsin.errors import ValidationError
from tocsin.stores.sqlite import SQLiteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    opened = SQLiteStore(tmp_path / "tocsin.db", buckets=4)
    yield opened
    opened.close()


def test_tokens_carry_their_key_id_and_256_random_bits() -> None:
    minted = [new_token() for _ in range(200)]
    for key_id, token in minted:
        match = TOKEN.match(token)
        assert match is not None and match.group(1) == key_id
        assert len(token.rsplit("_", 1)[1]) == 64  # 32 bytes in hex
    assert len({t for _, t in minted}) == len({k for k, _ in minted}) == 200


def test_the_store_holds_the_digest_not_the_token(store: Store) -> None:
    key, token = issue_key(store, role=Role.TENANT, tenant="acme", read_only=True,
                           name="ci", now_ms=1_700_000_000_000)
    assert key.digest == hashlib.sha256(token.encode()).hexdigest() == digest_of(token)
    stored = store.list_keys(tenant="acme")
    assert [k.id for k in stored] == [key.id] and token not in repr(stored)
    shown = describe(key)
    assert shown == {"id": key.id, "role": "tenant", "tenant": "acme", "read_only": True,
                     "name": "ci", "created_at": "2023-11-14T22:13:20.000Z",
                     "revoked_at": None}


def test_only_an_active_key_is_found(store: Store) -> None:
    key, token = issue_key(store, role=Role.ADMIN, now_ms=1)
    found = find_key(store, token)
    assert found is not None and found.id == key.id and found.role is Role.ADMIN
    assert find_key(store, token[:-1] + ("a" if token[-1] != "a" else "b")) is None
    for malformed in ("", "tsk_", token + "0", token.upper(), f"Bearer {token}"):
        assert find_key(store, malformed) is None
    store.revoke_key(key.id, now_ms=2)
    assert find_key(store, token) is None


def test_a_key_and_its_role_must_agree(store: Store) -> None:
    with pytest.raises(ValidationError, match="tenant"):
        issue_key(store, role=Role.TENANT, now_ms=1)
    with pytest.raises(ValidationError, match="tenant"):
        issue_key(store, role=Role.ADMIN, tenant="acme", now_ms=1)

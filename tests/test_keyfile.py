"""The local admin key file: where it lives, who may read it, when it is (re)written, and
which key the CLI and the client send."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tocsin.abc import Store
from tocsin.apikeys.keyfile import (
    ensure_admin_key,
    is_loopback,
    key_for,
    key_path,
    no_admin_hint,
    read_key,
    write_key,
)
from tocsin.apikeys.tokens import TOKEN, digest_of, find_key, issue_key
from tocsin.config import Settings
from tocsin.domain import Role
from tocsin.stores.sqlite import SQLiteStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    """The file's logic over the embedded store (the key store itself is tested on every
    backend in tests/stores)."""
    opened = SQLiteStore(tmp_path / "tocsin.db", buckets=4)
    yield opened
    opened.close()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize(("url", "local"), [
    ("http://127.0.0.1:8765", True), ("http://localhost:1", True), ("http://127.9.9.9", True),
    ("http://[::1]:8765", True), ("https://tocsin.example.com", False),
    ("http://10.0.0.5:8765", False), ("http://0.0.0.0:8765", False),
    ("http://127.0.0.1.nip.io", False),
])
def test_only_loopback_urls_are_local(url: str, local: bool) -> None:
    assert is_loopback(url) is local


def test_which_key_is_sent(tmp_path: Path) -> None:
    home = Settings(home=tmp_path)
    assert key_for("http://127.0.0.1:8765", home) is None
    write_key(key_path(home), "tsk_local")
    assert key_for("http://127.0.0.1:8765", home) == "tsk_local"
    assert key_for("https://tocsin.example.com", home) is None, "the local key stays local"
    explicit = Settings(home=tmp_path, api_key="tsk_env")
    assert key_for("http://127.0.0.1:8765", explicit) == "tsk_env"
    assert key_for("https://tocsin.example.com", explicit) == "tsk_env"


def test_the_key_file_is_owner_only_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "home" / "admin.key"
    leftover = path.parent / f".admin.key.{os.getpid()}.tmp"
    path.parent.mkdir(parents=True)
    leftover.write_text("junk")
    leftover.chmod(0o644)  # a crash left a readable temporary file behind
    write_key(path, "tsk_one")
    assert path.read_text() == "tsk_one\n" and _mode(path) == 0o600
    write_key(path, "tsk_two")
    assert path.read_text() == "tsk_two\n" and _mode(path) == 0o600
    assert sorted(p.name for p in path.parent.iterdir()) == ["admin.key"]


def test_tocsin_up_writes_an_admin_key_once(store: Store, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    settings = Settings(home=tmp_path / "home")
    written = ensure_admin_key(settings, store, now_ms=1)
    assert written == tmp_path / "home" / "admin.key" and _mode(written) == 0o600
    token = read_key(settings)
    assert token is not None and TOKEN.match(token)
    key = find_key(store, token)
    assert key is not None and key.role is Role.ADMIN and key.digest == digest_of(token)

    written.chmod(0o644)
    assert ensure_admin_key(settings, store, now_ms=2) is None, "a known key is kept"
    assert read_key(settings) == token and _mode(written) == 0o600

    store.revoke_key(key.id, now_ms=3)
    assert ensure_admin_key(settings, store, now_ms=4) is None, "a revocation is not undone"
    assert read_key(settings) == token and "revoked" in capsys.readouterr().err


def test_a_key_the_store_does_not_know_is_replaced(store: Store, tmp_path: Path) -> None:
    settings = Settings(home=tmp_path)
    _, other = issue_key(store, role=Role.ADMIN, now_ms=1)
    write_key(key_path(settings), other[:-1] + ("0" if other[-1] != "0" else "1"))
    assert ensure_admin_key(settings, store, now_ms=2) == key_path(settings)
    fresh = read_key(settings)
    assert fresh is not None and find_key(store, fresh) is not None


def test_an_api_over_a_store_without_an_admin_key_says_how_to_make_one(store: Store) -> None:
    hint = no_admin_hint(store)
    assert hint is not None and "tocsin apikeys create --local --role admin" in hint
    issue_key(store, role=Role.TENANT, tenant="acme", now_ms=1)
    assert no_admin_hint(store) == hint, "a tenant key cannot create others"
    admin, _ = issue_key(store, role=Role.ADMIN, now_ms=2)
    assert no_admin_hint(store) is None
    store.revoke_key(admin.id, now_ms=3)
    assert no_admin_hint(store) == hint

"""Issue 40, finding 6: secrets at rest, on every backend. Channel secrets are sealed with
``TOCSIN_ENCRYPTION_KEY`` (AES-GCM, ``v1:<key id>:<nonce>:<ciphertext>``), read back in
clear, refused in one line without the key, rotated by ``tocsin encryption rotate``; the key
shows nowhere. The SQLite store, a file channel's output and an import's rejects are
owner-only."""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.channels.envelopes import envelopes
from tocsin.abc import Store
from tocsin.channels.file import FileChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.cli.app import app
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.sealing import EncryptionKeyError, Sealer, new_key
from tocsin.stores import open_store
from tocsin.stores.sqlite import SQLiteStore

SECRETS = {"webhook-secret-1", "sasl-pw-2", "amqp-pw-3", "Bearer hdr-tok-4"}
CHANNELS = [
    ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK, config={
        "url": "https://127.0.0.1/in", "secret": "webhook-secret-1",
        "headers": {"Authorization": "Bearer hdr-tok-4", "X-Trace": "visible"}}),
    ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": "127.0.0.1:9092", "topic": "t",
        "producer": {"sasl.username": "me", "sasl.password": "sasl-pw-2"}}),
    ChannelSpec(name="r", kind=ChannelKind.RABBITMQ, config={
        "url": "amqp://me:amqp-pw-3@127.0.0.1:5672/%2F", "routing_key": "q"}),
]


def _raw(store: Store) -> str:
    rows = store._rows("SELECT config FROM channels ORDER BY name")  # type: ignore[attr-defined]
    return "\n".join(r[0] for r in rows)


def test_channel_secrets_are_sealed_at_rest(store_url: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    key = new_key()
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", key)
    store = open_store(store_url)
    try:
        for spec in CHANNELS:
            store.put_channel(spec)
        raw = _raw(store)
        assert not [s for s in SECRETS if s in raw], raw
        assert raw.count('"v1:') == 4 and "visible" in raw and "sasl-pw" not in raw
        assert [store.get_channel(c.name, tenant="default").config for c in CHANNELS] == \
            [c.config for c in CHANNELS]
    finally:
        store.close()


def test_without_the_key_a_store_says_so_in_one_line(store_url: str,
                                                     monkeypatch: pytest.MonkeyPatch,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    key = new_key()
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", key)
    store = open_store(store_url)
    store.put_channel(CHANNELS[0])
    store.close()
    monkeypatch.delenv("TOCSIN_ENCRYPTION_KEY")
    with caplog.at_level(logging.WARNING, logger="tocsin.store"):
        bare = open_store(store_url)
    try:
        said = [r.getMessage() for r in caplog.records if r.name == "tocsin.store"]
        assert len(said) == 1 and "TOCSIN_ENCRYPTION_KEY is not set" in said[0]
        with pytest.raises(EncryptionKeyError) as refused:
            bare.get_channel("hook", tenant="default")
        message = str(refused.value)
        assert "\n" not in message and Sealer(key).current in message
        assert key not in message and key not in said[0]
    finally:
        bare.close()


def test_rotation_seals_every_secret_with_the_new_key(store_url: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = new_key(), new_key()
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", old)
    monkeypatch.setenv("TOCSIN_STORE", store_url)
    store = open_store(store_url)
    for spec in CHANNELS:
        store.put_channel(spec)
    store.close()
    ran = CliRunner().invoke(app, ["encryption", "rotate", "--old", old, "--new", new])
    assert ran.exit_code == 0, ran.output
    assert old not in ran.output and new not in ran.output
    assert Sealer(new).current in ran.output
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", new)
    rotated = open_store(store_url)
    try:
        assert f'"v1:{Sealer(old).current}' not in _raw(rotated)
        assert rotated.get_channel("k", tenant="default").config == CHANNELS[1].config
    finally:
        rotated.close()
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", old)  # the old key alone no longer opens them
    stale = open_store(store_url)
    try:
        with pytest.raises(EncryptionKeyError):
            stale.get_channel("k", tenant="default")
    finally:
        stale.close()


def test_the_key_is_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    key = new_key()
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", key)
    monkeypatch.setenv("TOCSIN_ENCRYPTION_OLD_KEYS", new_key())
    assert key not in str(Settings().summary())
    ran = CliRunner().invoke(app, ["config"])
    assert ran.exit_code == 0 and key not in ran.output
    assert key not in repr(Sealer(key))
    with pytest.raises(EncryptionKeyError) as bad:
        Sealer("not-a-key-at-all")
    assert "not-a-key-at-all" not in str(bad.value)


def test_the_sqlite_store_and_its_wal_are_owner_only(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "home" / "tocsin.db")
    store.put_channel(CHANNELS[0])
    for name in ("tocsin.db", "tocsin.db-wal", "tocsin.db-shm"):
        path = tmp_path / "home" / name
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, name
    assert stat.S_IMODE((tmp_path / "home").stat().st_mode) == 0o700
    store.close()
    older = tmp_path / "older.db"
    older.touch(mode=0o644)
    os.chmod(older, 0o644)
    SQLiteStore(older).close()
    assert stat.S_IMODE(older.stat().st_mode) == 0o600


def test_a_file_channels_output_is_owner_only(tmp_path: Path) -> None:
    policy = DestinationPolicy.build(file_roots=[tmp_path / "channels"])
    channel = FileChannel(ChannelSpec(name="out", kind=ChannelKind.FILE), policy=policy)
    channel.send(envelopes(1))
    assert stat.S_IMODE((tmp_path / "channels" / "out.jsonl").stat().st_mode) == 0o600


def test_a_child_process_gets_the_key_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """``tocsin up`` hands its settings to the dispatcher it starts: the key, not its mask."""
    key = new_key()
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", key)
    assert Settings().environment()["TOCSIN_ENCRYPTION_KEY"] == key

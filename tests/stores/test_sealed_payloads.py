"""Issue 40: payloads encrypted at rest, on every backend. With ``TOCSIN_ENCRYPT_PAYLOADS``
the store keeps each schedule's and rule's payload sealed (AES-GCM with
``TOCSIN_ENCRYPTION_KEY``) and hands it back in clear to delivery, ``GET`` and the dead
letters; ``tocsin encryption rotate`` seals them again with the new key."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tocsin.abc import Store
from tocsin.cli.app import app
from tocsin.clock import SystemClock
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.domain import (
    Ack,
    ChannelKind,
    ChannelSpec,
    CronTrigger,
    NewSchedule,
    Outcome,
    PayloadKind,
    Recurring,
    Status,
)
from tocsin.sealing import (
    PAYLOAD_MAGIC,
    EncryptionKeyError,
    PayloadKeys,
    Sealer,
    new_key,
    use_payload_keys,
)
from tocsin.stores import open_store
from tocsin.testing.api_server import ApiServer

SECRET = b'{"card": "4111-1111-1111-1111"}'


@pytest.fixture(autouse=True)
def _settings_keys() -> Iterator[None]:
    """Each test sets the process's payload keys; the next reads its settings afresh."""
    use_payload_keys(None)
    yield
    use_payload_keys(None)


def _sealing(key: str, *old: str, seal: bool = True) -> None:
    use_payload_keys(PayloadKeys(Sealer(key, old), seal=seal))


def _raw(store: Store, table: str = "schedules") -> dict[str, bytes]:
    rows = store._rows(f"SELECT id, payload FROM {table}")  # type: ignore[attr-defined]
    return {str(r[0]): bytes(r[1]) for r in rows}


def _now() -> int:
    return SystemClock().now_ms()


def test_payloads_are_sealed_at_rest_and_delivered_in_clear(store_url: str,
                                                            tmp_path: Path) -> None:
    _sealing(new_key())
    out = tmp_path / "out.jsonl"
    store = open_store(store_url, buckets=8)
    try:
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                      config={"path": str(out)}))
        now = _now()
        [(s, _)] = store.create([NewSchedule(channel="out", payload=SECRET, due_ms=now,
                                             key="k1")], now_ms=now)
        [(b, _)] = store.create([NewSchedule(channel="out", payload=b"\x00\x01raw",
                                             payload_kind=PayloadKind.BINARY,
                                             due_ms=now + 3_600_000)], now_ms=now)
        raw = _raw(store)
        assert all(v.startswith(PAYLOAD_MAGIC) for v in raw.values())
        assert b"4111" not in raw[s.id] and b"raw" not in raw[b.id]
        assert store.get(s.id).payload == SECRET and store.get(b.id).payload == b"\x00\x01raw"
        changed = store.reschedule(b.id, now_ms=now, payload=b"\x02new")
        assert changed.payload == b"\x02new" and b"new" not in _raw(store)[b.id]
        served = ApiServer(store).start()
        try:
            got = httpx.get(f"{served.url}/v1/schedules/{s.id}", headers=served.headers)
        finally:
            served.stop()
        assert got.status_code == 200 and got.json()["payload"] == json.loads(SECRET)
        local = LocalDispatcher(store, clock=SystemClock())
        try:
            local.run_until_idle()
        finally:
            local.close()
        assert store.get(s.id).status is Status.DELIVERED
        [line] = out.read_text().splitlines()
        assert json.loads(line)["payload"] == json.loads(SECRET)
    finally:
        store.close()


def test_a_dead_letter_copy_and_a_rule_are_sealed_once(store_url: str) -> None:
    _sealing(new_key())
    store = open_store(store_url, buckets=8)
    try:
        now = _now()
        [(s, _)] = store.create([NewSchedule(channel="out", payload=SECRET, due_ms=now)],
                                now_ms=now)
        [row] = [r for r in store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=7,
                                        until_ms=now, now_ms=now, lease_ms=60_000, limit=10)
                 if r.id == s.id]
        assert row.payload == SECRET  # the claim hands it over opened
        store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
            schedule_id=s.id, delivery_id=f"{s.id}-1", attempt=1, outcome=Outcome.REJECTED,
            error="no", started_ms=now, ended_ms=now, due_ms=now, status=Status.DEAD,
            dead_letter="dlq")])
        [copy] = [c for c in store.list_schedules(channel="dlq")]
        assert copy.payload == SECRET
        assert _raw(store)[copy.id].count(PAYLOAD_MAGIC) == 1
        rule = store.create_recurring(Recurring(
            id="r1", tenant="default", trigger=CronTrigger.parse("0 * * * *", "UTC"),
            channel="out", payload=SECRET, created_ms=now, updated_ms=now), now_ms=now)
        assert b"4111" not in _raw(store, "recurring")["r1"]
        assert store.get_recurring(rule.id, tenant="default").payload == SECRET
    finally:
        store.close()


def test_off_by_default_and_a_flag_without_a_key_is_refused(store_url: str,
                                                            monkeypatch: pytest.MonkeyPatch
                                                            ) -> None:
    monkeypatch.delenv("TOCSIN_ENCRYPTION_KEY", raising=False)
    store = open_store(store_url, buckets=8)
    try:
        now = _now()
        [(s, _)] = store.create([NewSchedule(channel="out", payload=SECRET, due_ms=now)],
                                now_ms=now)
        assert _raw(store)[s.id] == SECRET  # in clear unless asked
    finally:
        store.close()
    with pytest.raises(EncryptionKeyError, match="TOCSIN_ENCRYPTION_KEY is not set"):
        PayloadKeys(Sealer(None), seal=True)


def test_rotation_seals_every_payload_with_the_new_key(store_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    old, new = new_key(), new_key()
    store = open_store(store_url, buckets=8)
    try:
        now = _now()
        [(clear, _)] = store.create([NewSchedule(channel="out", payload=b'{"a": 1}',
                                                 due_ms=now)], now_ms=now)
        _sealing(old)
        made = store.create([NewSchedule(channel="out", payload=SECRET, due_ms=now + i)
                             for i in range(3)], now_ms=now)
        sealed = [s.id for s, _ in made]
    finally:
        store.close()
    monkeypatch.setenv("TOCSIN_STORE", store_url)
    monkeypatch.setenv("TOCSIN_ENCRYPTION_KEY", new)
    monkeypatch.setenv("TOCSIN_ENCRYPT_PAYLOADS", "true")
    ran = CliRunner().invoke(app, ["encryption", "rotate", "--old", old, "--new", new])
    assert ran.exit_code == 0, ran.output
    assert json.loads(ran.output)["payloads"] == 4  # three sealed again, one sealed at last
    assert old not in ran.output and new not in ran.output
    _sealing(new)
    store = open_store(store_url, buckets=8)
    try:
        raw = _raw(store)
        prefix = PAYLOAD_MAGIC + (Sealer(new).current or "").encode()
        assert all(v.startswith(prefix) for v in raw.values())
        assert [store.get(i).payload for i in sealed] == [SECRET] * 3
        assert store.get(clear.id).payload == b'{"a": 1}'
        _sealing(old)  # the old key alone no longer opens them
        with pytest.raises(EncryptionKeyError, match=f"key {Sealer(new).current}"):
            store.get(sealed[0])
    finally:
        store.close()

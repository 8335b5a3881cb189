"""Re-drive and pause over real HTTP, through the Python client."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest

from tocsin.abc import Store
from tocsin.client import Client
from tocsin.domain import Ack, Outcome, Status
from tocsin.errors import ConflictError, NotFoundError, ValidationError
from tocsin.testing.api_server import ApiServer


@pytest.fixture(scope="module")
def client(api_server: ApiServer) -> Iterator[Client]:
    with Client(api_server.url, api_key=api_server.admin_key) as c:
        yield c


def _dead(store: Store, client: Client, channel: str = "out") -> str:
    sid = client.schedule(channel, {"n": 1}, delay=0)["id"]
    bucket = store.get(sid).bucket
    now = time.time_ns() // 1_000_000
    [row] = [r for r in store.claim(epoch=store.next_epoch(), bucket_lo=bucket,
                                    bucket_hi=bucket, until_ms=now, now_ms=now,
                                    lease_ms=600_000, limit=1000) if r.id == sid]
    store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
        schedule_id=sid, delivery_id=f"{sid}-1", attempt=1, outcome=Outcome.REJECTED,
        error="no", started_ms=now, ended_ms=now, due_ms=row.due_ms, status=Status.DEAD)])
    return sid


def test_redrive_one(client: Client, api_store: Store) -> None:
    sid = _dead(api_store, client)
    again = client.redrive(sid)
    assert again["status"] == "PENDING"
    with pytest.raises(ConflictError) as caught:
        client.redrive(sid)
    assert caught.value.status == "PENDING"
    with pytest.raises(NotFoundError):
        client.redrive("01NOSUCHSCHEDULE0000000000")


def test_redrive_by_predicate(client: Client, api_store: Store) -> None:
    client.add_channel("side", "file", {"path": "/tmp/tocsin-side.jsonl"})
    side = [_dead(api_store, client, "side") for _ in range(3)]
    out = _dead(api_store, client)
    assert client.redrive_dead(channel="side", limit=2) == 2
    assert client.redrive_dead(channel="side") == 1
    assert {api_store.get(i).status for i in side} == {Status.PENDING}
    assert api_store.get(out).status is Status.DEAD


def test_redrive_bad_input_names_the_field(api: httpx.Client) -> None:
    for body, field in (({"limit": 0}, "limit"), ({"due_from": "2030-01-01T00:00:00"},
                                                  "due_from"), ({"status": "PENDING"}, "status")):
        r = api.post("/v1/schedules/redrive", json=body)
        assert r.status_code == 422, r.text
        assert field in r.text
    with pytest.raises(ValidationError):
        Client(str(api.base_url), api_key=api.headers["authorization"][7:]).redrive_dead(limit=0)


def test_pause_and_resume(client: Client) -> None:
    paused = client.pause_channel("out")
    assert (paused["name"], paused["paused"]) == ("out", True)
    assert [p["name"] for p in client.paused_channels()] == ["out"]
    assert client.resume_channel("out")["was_paused"] is True
    assert client.resume_channel("out")["was_paused"] is False
    assert client.paused_channels() == []
    with pytest.raises(NotFoundError):
        client.pause_channel("ghost")

"""Reschedule, task keys and ordering keys over real HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx

from tocsin.abc import Store
from tocsin.domain import Ack, Outcome, Status


def _post(api: httpx.Client, **body: object) -> httpx.Response:
    return api.post("/v1/schedules", json={"channel": "out", **body})


def test_patch_moves_a_pending_schedule(api: httpx.Client) -> None:
    sid = _post(api, payload=1, delay=600).json()["id"]
    due = datetime.now(UTC) + timedelta(hours=2)
    r = api.patch(f"/v1/schedules/{sid}", json={"due_at": due.isoformat(),
                                                "payload": {"v": 2}, "headers": {"h": "x"}})
    assert r.status_code == 200, r.text
    got = api.get(f"/v1/schedules/{sid}").json()
    assert abs(datetime.fromisoformat(got["due_at"]) - due) < timedelta(milliseconds=1)
    assert got["payload"] == {"v": 2} and got["headers"] == {"h": "x"}


def test_patch_bad_input_changes_nothing(api: httpx.Client, api_store: Store) -> None:
    sid = _post(api, payload=1, delay=600).json()["id"]
    before = api_store.get(sid)
    naive = api.patch(f"/v1/schedules/{sid}", json={"due_at": "2030-01-01T10:00:00"})
    assert naive.status_code == 422 and naive.json()["error"]["field"] == "due_at"
    empty = api.patch(f"/v1/schedules/{sid}", json={})
    assert empty.status_code == 422 and empty.json()["error"]["field"] == "body"
    assert api_store.get(sid) == before
    assert api.patch("/v1/schedules/missing", json={"delay": 5}).status_code == 404


def test_patch_of_a_delivered_schedule_is_409(api: httpx.Client, api_store: Store) -> None:
    past = (datetime.now(UTC) - timedelta(seconds=1)).isoformat()
    sid = _post(api, payload=1, due_at=past).json()["id"]
    bucket = api_store.get(sid).bucket
    now = time.time_ns() // 1_000_000
    epoch = api_store.next_epoch()
    [row] = [r for r in api_store.claim(epoch=epoch, bucket_lo=bucket, bucket_hi=bucket,
                                        until_ms=now, now_ms=now, lease_ms=60_000, limit=1000)
             if r.id == sid]
    api_store.acknowledge(epoch=epoch, now_ms=now, acks=[Ack(
        schedule_id=sid, delivery_id=f"{sid}-1", attempt=1, outcome=Outcome.DELIVERED,
        error=None, started_ms=now, ended_ms=now, due_ms=row.due_ms, status=Status.DELIVERED)])
    r = api.patch(f"/v1/schedules/{sid}", json={"delay": 60})
    assert r.status_code == 409 and r.json()["error"]["status"] == "DELIVERED"


def test_task_key_overwrites_while_pending(api: httpx.Client) -> None:
    due = (datetime.now(UTC) + timedelta(minutes=30)).replace(microsecond=0).isoformat()
    body = {"ordering_key": "order-77", "uniqueness_key": "expire", "due_at": due}
    first = _post(api, payload={"v": 1}, **body)
    second = _post(api, payload={"v": 2}, **body)
    assert first.status_code == 201 and second.status_code == 200
    assert first.json()["id"] == second.json()["id"]
    assert api.get(f"/v1/schedules/{first.json()['id']}").json()["payload"] == {"v": 2}


def test_oversized_keys_are_refused(api: httpx.Client, api_store: Store) -> None:
    before = sum(api_store.counts().values())
    for field in ("ordering_key", "uniqueness_key"):
        r = _post(api, payload=1, delay=5, **{field: "k" * 257})
        assert r.status_code == 422 and r.json()["error"]["field"] == field
    assert sum(api_store.counts().values()) == before


def test_halted_keys_list_and_resume(api: httpx.Client, api_store: Store) -> None:
    assert api.get("/v1/ordering-keys", params={"halted": "true"}).json() == {"items": []}
    assert api.post("/v1/ordering-keys/none/resume").status_code == 404

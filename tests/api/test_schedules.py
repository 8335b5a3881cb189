"""Creating, reading, listing and cancelling schedules over real HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx

from tocsin.abc import Store
from tocsin.domain import Status


def _post(api: httpx.Client, **body: object) -> httpx.Response:
    return api.post("/v1/schedules", json={"channel": "out", **body})


def test_create_answers_201_with_id_status_due_and_bucket(api: httpx.Client) -> None:
    due = datetime.now(UTC) + timedelta(minutes=5)
    r = _post(api, payload={"order": 42}, due_at=due.isoformat())
    assert r.status_code == 201
    body = r.json()
    assert body["status"] == "PENDING"
    assert abs(datetime.fromisoformat(body["due_at"]) - due) < timedelta(milliseconds=1)
    assert 0 <= body["bucket"] < 16
    got = api.get(f"/v1/schedules/{body['id']}").json()
    assert got["payload"] == {"order": 42} and got["attempts"] == 0 and got["channel"] == "out"


def test_delay_in_seconds_and_iso_duration(api: httpx.Client) -> None:
    before = datetime.now(UTC)
    seconds = _post(api, payload=1, delay=30).json()
    iso = _post(api, payload=1, delay="PT1H30M").json()
    assert timedelta(seconds=29) < datetime.fromisoformat(seconds["due_at"]) - before \
        < timedelta(seconds=32)
    assert timedelta(minutes=89) < datetime.fromisoformat(iso["due_at"]) - before \
        < timedelta(minutes=91)


def test_payload_forms_round_trip(api: httpx.Client) -> None:
    text = _post(api, payload_text="héllo", delay=60).json()["id"]
    raw = _post(api, payload_base64="AAEC/w==", delay=60).json()["id"]
    assert api.get(f"/v1/schedules/{text}").json()["payload_text"] == "héllo"
    assert api.get(f"/v1/schedules/{raw}").json()["payload_base64"] == "AAEC/w=="


def test_a_due_time_within_the_grace_window_is_accepted(api: httpx.Client) -> None:
    past = datetime.now(UTC) - timedelta(seconds=30)
    assert _post(api, payload=1, due_at=past.isoformat()).status_code == 201


def test_batch_is_created_whole(api: httpx.Client, api_store: Store) -> None:
    before = api_store.counts()[Status.PENDING]
    items = [{"channel": "out", "payload": {"i": i}, "delay": 60} for i in range(500)]
    r = api.post("/v1/schedules", json={"schedules": items})
    assert r.status_code == 201
    assert len(r.json()["schedules"]) == 500
    assert api_store.counts()[Status.PENDING] == before + 500


def test_idempotency_key(api: httpx.Client) -> None:
    first = _post(api, payload={"a": 1}, delay=60, key="order-7-reminder")
    again = _post(api, payload={"a": 1}, delay=60, key="order-7-reminder")
    other = _post(api, payload={"a": 2}, delay=60, key="order-7-reminder")
    assert first.status_code == 201 and again.status_code == 200
    assert again.json()["id"] == first.json()["id"]
    assert other.status_code == 409
    assert first.json()["id"] in other.json()["error"]["message"]


def test_cancel_then_too_late(api: httpx.Client, api_store: Store) -> None:
    sid = _post(api, payload=1, delay=60).json()["id"]
    r = api.delete(f"/v1/schedules/{sid}")
    assert r.status_code == 200 and r.json()["status"] == "CANCELLED"
    assert api.get(f"/v1/schedules/{sid}").json()["status"] == "CANCELLED"
    again = api.delete(f"/v1/schedules/{sid}")
    assert again.status_code == 409 and again.json()["error"]["status"] == "CANCELLED"


def test_cancel_of_a_claimed_schedule_is_refused_with_its_status(api: httpx.Client,
                                                                 api_store: Store) -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    sid = _post(api, payload=1, due_at=past.isoformat()).json()["id"]
    bucket = api_store.get(sid).bucket
    now = time.time_ns() // 1_000_000
    epoch = api_store.next_epoch()
    claimed = api_store.claim(epoch=epoch, bucket_lo=bucket, bucket_hi=bucket, until_ms=now,
                              now_ms=now, lease_ms=60_000, limit=1000)
    assert sid in {row.id for row in claimed}
    r = api.delete(f"/v1/schedules/{sid}")
    assert r.status_code == 409
    assert r.json()["error"]["status"] == "CLAIMED"
    assert api_store.get(sid).status is Status.CLAIMED


def test_unknown_schedule_is_404(api: httpx.Client) -> None:
    assert api.get("/v1/schedules/nope").status_code == 404
    assert api.delete("/v1/schedules/nope").status_code == 404
    assert api.get("/v1/schedules/nope/deliveries").status_code == 404


def test_list_filters_and_pages(api: httpx.Client) -> None:
    items = [{"channel": "out", "payload": i, "delay": 3600} for i in range(25)]
    api.post("/v1/schedules", json={"schedules": items})
    seen: list[str] = []
    cursor = None
    while True:
        params: dict[str, object] = {"status": "PENDING", "limit": 10}
        if cursor:
            params["cursor"] = cursor
        page = api.get("/v1/schedules", params=params).json()
        seen += [item["id"] for item in page["items"]]
        assert all(item["status"] == "PENDING" for item in page["items"])
        cursor = page["next_cursor"]
        if not cursor:
            break
    assert len(seen) == len(set(seen)) >= 25
    assert seen == sorted(seen)
    cancelled = api.get("/v1/schedules", params={"status": "CANCELLED"}).json()["items"]
    assert all(item["status"] == "CANCELLED" for item in cancelled)

"""Creating, reading, listing and cancelling schedules over real HTTP."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import httpx

from tocsin.abc import Store
from tocsin.domain import Ack, Outcome, Status


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


def test_find_a_schedule_by_its_idempotency_key(api: httpx.Client) -> None:
    made = _post(api, payload={"a": 1}, delay=60, key="invoice-42-due").json()["id"]
    _post(api, payload={"a": 1}, delay=60, key="invoice-43-due")
    found = api.get("/v1/schedules", params={"key": "invoice-42-due"}).json()
    assert [item["id"] for item in found["items"]] == [made]
    assert found["items"][0]["key"] == "invoice-42-due"
    assert api.get("/v1/schedules", params={"key": "no-such-key"}).json()["items"] == []


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
        params: dict[str, str | int] = {"status": "PENDING", "limit": 10}
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


def test_get_reports_every_field(api: httpx.Client) -> None:
    # channels are the tenant's own: acme registers its "out"
    assert api.post("/v1/channels", json={"name": "out", "kind": "recording",
                                          "tenant": "acme"}).status_code == 201
    r = _post(api, payload=None, due_at="2031-06-01T12:00:00+02:00", headers={"h": "v"},
              key="every-field", ordering_key="ok-1", tenant="acme")
    assert r.status_code == 201 and r.json()["due_at"] == "2031-06-01T10:00:00.000Z"
    got = api.get(f"/v1/schedules/{r.json()['id']}").json()
    assert got | {"created_at": None} == {
        "id": r.json()["id"], "tenant": "acme", "channel": "out", "status": "PENDING",
        "due_at": "2031-06-01T10:00:00.000Z", "created_at": None, "attempts": 0,
        "last_error": None, "next_attempt_at": "2031-06-01T10:00:00.000Z",
        "delivered_at": None, "lateness_ms": None, "payload": None, "headers": {"h": "v"},
        "key": "every-field", "ordering_key": "ok-1", "bucket": r.json()["bucket"],
        "policy": None, "recurring_id": None, "expires_at": None, "max_lateness": None,
        "retry": None, "body": None, "method": None, "path": None,
        "retry_policy": {"max_attempts": 8, "base": 1.0, "cap": 300.0, "multiplier": 2.0,
                         "jitter": 0.5, "max_retry_duration": None}, "labels": {}}
    assert got["created_at"].endswith("Z")


def test_a_repeat_is_recognised_whatever_its_key_order(api: httpx.Client) -> None:
    first = api.post("/v1/schedules", content=b'{"channel": "out", "key": "ko", "delay": "PT1H",'
                     b' "payload": {"a": 1, "b": [1, 2]}, "headers": {"x": "1", "y": "2"}}',
                     headers={"content-type": "application/json"})
    again = api.post("/v1/schedules", content=b'{"headers": {"y": "2", "x": "1"},"payload":'
                     b'{"b":[1,2],"a":1},"delay":"PT1H","key":"ko","channel":"out"}',
                     headers={"content-type": "application/json"})
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"] and again.json()["created"] is False


def test_a_batch_repeat_finds_the_same_schedules(api: httpx.Client) -> None:
    items = [{"channel": "out", "payload": i, "delay": 600, "key": f"batch-{i}"}
             for i in range(3)]
    first = api.post("/v1/schedules", json={"schedules": items})
    again = api.post("/v1/schedules", json={"schedules": items})
    mixed = api.post("/v1/schedules", json={"schedules": [
        *items, {"channel": "out", "payload": 3, "delay": 600, "key": "batch-3"}]})
    assert (first.status_code, again.status_code, mixed.status_code) == (201, 200, 201)
    ids = [s["id"] for s in first.json()["schedules"]]
    assert [s["id"] for s in again.json()["schedules"]] == ids
    assert [s["created"] for s in mixed.json()["schedules"]] == [False, False, False, True]


def test_list_by_channel_and_due_range(api: httpx.Client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    api.post("/v1/channels", json={"name": "ranged", "kind": "file",
                                   "config": {"path": str(tmp_path / "r.jsonl")}})
    dues = [f"2032-01-0{d}T00:00:00Z" for d in range(1, 6)]
    made = api.post("/v1/schedules", json={"schedules": [
        {"channel": "ranged", "payload": d, "due_at": d} for d in dues]}).json()["schedules"]
    page = api.get("/v1/schedules", params={"channel": "ranged", "due_from": dues[1],
                                            "due_to": dues[3]}).json()
    assert sorted(s["payload"] for s in page["items"]) == dues[1:3]  # [due_from, due_to)
    assert {s["id"] for s in page["items"]} <= {s["id"] for s in made}
    assert page["next_cursor"] is None


def test_deliveries_show_every_attempt(api: httpx.Client, api_store: Store) -> None:
    sid = _post(api, payload=1, due_at=datetime.now(UTC).isoformat()).json()["id"]
    bucket = api_store.get(sid).bucket
    now = time.time_ns() // 1_000_000
    epoch = api_store.next_epoch()
    [row] = [r for r in api_store.claim(epoch=epoch, bucket_lo=bucket, bucket_hi=bucket,
                                        until_ms=now, now_ms=now, lease_ms=60_000, limit=1000)
             if r.id == sid]
    api_store.acknowledge(epoch=epoch, now_ms=now + 5, acks=[Ack(
        schedule_id=sid, delivery_id=f"{sid}-1", attempt=1, outcome=Outcome.DELIVERED,
        error=None, started_ms=now, ended_ms=now + 5, due_ms=row.due_ms,
        status=Status.DELIVERED)])
    [attempt] = api.get(f"/v1/schedules/{sid}/deliveries").json()["items"]
    assert attempt["delivery_id"] == f"{sid}-1" and attempt["outcome"] == "delivered"
    assert attempt["attempt"] == 1 and attempt["epoch"] == epoch
    got = api.get(f"/v1/schedules/{sid}").json()
    assert got["status"] == "DELIVERED" and got["lateness_ms"] is not None
    refused = api.delete(f"/v1/schedules/{sid}")
    assert refused.status_code == 409 and refused.json()["error"]["status"] == "DELIVERED"


def test_the_last_page_has_no_cursor(api: httpx.Client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    api.post("/v1/channels", json={"name": "paged", "kind": "file",
                                   "config": {"path": str(tmp_path / "p.jsonl")}})
    api.post("/v1/schedules", json={"schedules": [
        {"channel": "paged", "payload": i, "delay": 60} for i in range(4)]})
    first = api.get("/v1/schedules", params={"channel": "paged", "limit": 2}).json()
    second = api.get("/v1/schedules", params={"channel": "paged", "limit": 2,
                                              "cursor": first["next_cursor"]}).json()
    assert len(first["items"]) == len(second["items"]) == 2
    assert second["next_cursor"] is None

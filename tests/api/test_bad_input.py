"""Bad input gets a 4xx naming the field and the reason, and stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import httpx
import pytest

from tocsin.abc import Store


def _count(store: Store) -> int:
    return sum(store.counts().values())


def _refused(api: httpx.Client, store: Store, body: object, field: str, words: str,
             status: int = 422, **kw: object) -> dict[str, object]:
    before = _count(store)
    r = api.post("/v1/schedules", json=body, **kw) if body is not None else api.post(
        "/v1/schedules", **kw)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["field"] == field, error
    assert words in error["message"], error
    assert _count(store) == before, "a refused request stored something"
    return error  # type: ignore[no-any-return]


def test_naive_due_time(api: httpx.Client, api_store: Store) -> None:
    _refused(api, api_store, {"channel": "out", "payload": 1, "due_at": "2030-01-01T09:00:00"},
             "due_at", "naive")


def test_unknown_channel(api: httpx.Client, api_store: Store) -> None:
    _refused(api, api_store, {"channel": "nowhere", "payload": 1, "delay": 5}, "channel",
             "'nowhere' is not registered")


def test_payload_over_the_limit(api: httpx.Client, api_store: Store) -> None:
    error = _refused(api, api_store, {"channel": "out", "payload_text": "x" * 300_000,
                                      "delay": 5}, "payload_text", "limit is 262144")
    assert "300000 bytes" in str(error["message"])


def test_too_far_in_the_past(api: httpx.Client, api_store: Store) -> None:
    past = (datetime.now(UTC) - timedelta(minutes=10)).isoformat()
    error = _refused(api, api_store, {"channel": "out", "payload": 1, "due_at": past},
                     "due_at", "in the past")
    assert "grace window is 60 s" in str(error["message"])


def test_malformed_json(api: httpx.Client, api_store: Store) -> None:
    _refused(api, api_store, None, "body", "malformed JSON", content=b'{"channel": "out",',
             headers={"content-type": "application/json"})


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"channel": "out", "payload": 1}, "due_at", "exactly one of due_at or delay"),
    ({"channel": "out", "payload": 1, "delay": 5, "due_at": "2030-01-01T00:00:00Z"}, "due_at",
     "exactly one of due_at or delay"),
    ({"channel": "out", "delay": 5}, "payload", "exactly one of payload"),
    ({"channel": "out", "payload": 1, "payload_text": "x", "delay": 5}, "payload",
     "exactly one of payload"),
    ({"channel": "out", "payload": 1, "delay": "soon"}, "delay", "ISO 8601"),
    ({"channel": "out", "payload": 1, "delay": -3}, "delay", "negative"),
    ({"channel": "out", "payload_base64": "%%%", "delay": 5}, "payload_base64", "base64"),
    ({"channel": "out", "payload": 1, "delay": 5, "colour": "red"}, "colour", "xtra"),
    ({"channel": "out", "payload": 1, "delay": 5, "key": "k" * 300}, "key", "256"),
])
def test_field_errors(api: httpx.Client, api_store: Store, body: dict[str, object], field: str,
                      words: str) -> None:
    _refused(api, api_store, body, field, words)


def test_a_batch_with_one_bad_item_stores_nothing(api: httpx.Client, api_store: Store) -> None:
    items: list[dict[str, object]] = [
        {"channel": "out", "payload": {"i": i}, "delay": 60} for i in range(100)]
    items[37] = {"channel": "out", "payload": 1, "due_at": "2030-01-01T09:00:00"}
    error = _refused(api, api_store, {"schedules": items}, "schedules.37.due_at", "naive")
    assert error["errors"] == [{"index": 37, "field": "schedules.37.due_at",
                                "reason": error["reason"]}]


def test_a_batch_over_the_limit(api: httpx.Client, api_store: Store) -> None:
    items = [{"channel": "out", "payload": 1, "delay": 60}] * 10_001
    _refused(api, api_store, {"schedules": items}, "schedules", "1 to 10000")

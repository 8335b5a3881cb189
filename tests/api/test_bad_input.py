"""Bad input gets a 4xx naming the field and the reason, and stores nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tocsin.abc import Store


def _count(store: Store) -> int:
    return sum(store.counts().values())


def _refused(api: httpx.Client, store: Store, body: object, field: str, words: str,
             status: int = 422, **kw: Any) -> dict[str, object]:
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


@pytest.mark.parametrize("content", [
    b'{"channel": "out",', b"", b"\xff\xfe", b'{"channel": "out", "payload": NaN, "delay": 5}',
    b'{"channel": "out", "payload": 1, "delay": Infinity}',
])
def test_malformed_json(api: httpx.Client, api_store: Store, content: bytes) -> None:
    _refused(api, api_store, None, "body", "malformed JSON", content=content,
             headers={"content-type": "application/json"})


@pytest.mark.parametrize(("name", "value", "field"), [
    ("payload_text", '"\\ud800"', "payload_text"), ("payload", '{"a": "\\udfff"}', "payload"),
    ("headers", '{"h": "\\ud800"}', "headers.h"), ("key", '"\\ud800"', "key"),
])
def test_text_that_is_not_unicode(api: httpx.Client, api_store: Store, name: str, value: str,
                                  field: str) -> None:
    other = "" if name.startswith("payload") else '"payload": 1, '
    content = f'{{"channel": "out", {other}"{name}": {value}, "delay": 5}}'.encode()
    _refused(api, api_store, None, field, "Unicode", content=content,
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
    ({"channel": "out", "payload": 1, "delay": True}, "delay", "not a boolean"),
    ({"channel": "out", "payload": 1, "delay": 1e20}, "delay", "year 9999"),
    ({"channel": "out", "payload": 1, "delay": "P99999999D"}, "delay", "year 9999"),
    ({"channel": "out", "payload": 1, "due_at": "2030-02-30T00:00:00Z"}, "due_at", "2030-02-30"),
    ({"channel": "out", "payload": 1, "due_at": 1893456000}, "due_at", "string"),
    ({"channel": "out", "payload": 1, "delay": 5, "headers": {"a": 1}}, "headers.a", "string"),
    ({"channel": "out", "payload": 1, "delay": 5, "tenant": "a b"}, "tenant", "pattern"),
    ({"channel": "", "payload": 1, "delay": 5}, "channel", "at least 1"),
    ({"payload": 1, "delay": 5}, "channel", "required"),
    ([1, 2], "body", "dictionary"),
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


def test_a_batch_lists_every_bad_item(api: httpx.Client, api_store: Store) -> None:
    items: list[object] = [{"channel": "out", "payload": i, "delay": 60} for i in range(10)]
    items[2] = {"channel": "nowhere", "payload": 1, "delay": 60}
    items[5] = "not an object"
    items[9] = {"channel": "out", "payload": 1, "delay": 60, "payload_text": "x"}
    error = _refused(api, api_store, {"schedules": items}, "schedules.2.channel",
                     "and 2 more errors")
    assert error["errors"] == [
        {"index": 2, "field": "schedules.2.channel",
         "reason": "channel 'nowhere' is not registered"},
        {"index": 5, "field": "schedules.5",
         "reason": "Input should be a valid dictionary or instance of ScheduleIn"},
        {"index": 9, "field": "schedules.9.payload",
         "reason": "give exactly one of payload, payload_text, payload_base64 (got 2)"},
    ]


def test_one_key_for_two_requests_in_a_batch(api: httpx.Client, api_store: Store) -> None:
    items = [{"channel": "out", "payload": n, "delay": 60, "key": "twice"} for n in (1, 2)]
    error = _refused(api, api_store, {"schedules": items}, "schedules.1.key", "item 0")
    assert error["errors"] == [{"index": 1, "field": "schedules.1.key", "reason": error["reason"]}]
    assert api.post("/v1/schedules", json={"schedules": [items[0], items[0]]}).status_code == 201


@pytest.mark.parametrize("body", [{"schedules": []}, {"schedules": {}},
                                  {"schedules": [], "extra": 1}])
def test_a_batch_must_be_a_list(api: httpx.Client, api_store: Store, body: object) -> None:
    _refused(api, api_store, body, "schedules", "batch")


def test_a_batch_over_the_limit(api: httpx.Client, api_store: Store) -> None:
    items = [{"channel": "out", "payload": 1, "delay": 60}] * 10_001
    _refused(api, api_store, {"schedules": items}, "schedules", "1 to 10000")


def test_unknown_routes_and_methods_answer_in_the_same_shape(api: httpx.Client) -> None:
    for r, status in ((api.get("/v1/nothing"), 404), (api.put("/v1/schedules"), 405)):
        assert r.status_code == status
        assert r.json()["error"]["type"] == "HTTPError"


@pytest.mark.parametrize(("params", "field"), [
    ({"status": "LOST"}, "status"), ({"limit": 0}, "limit"), ({"limit": 5000}, "limit"),
    ({"due_from": "2030-01-01T00:00:00"}, "due_from"), ({"due_to": "soon"}, "due_to"),
])
def test_bad_list_queries(api: httpx.Client, params: dict[str, str | int], field: str) -> None:
    r = api.get("/v1/schedules", params=params)
    assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text

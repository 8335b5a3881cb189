"""Delivery terms through the real API on both stores: ``expires_at``, ``max_lateness`` and
``retry`` on a schedule and a recurring one, a channel's defaults, the effective retry policy
in the schedule's answer, and bad values refused with 422 naming the field."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest

from tocsin.abc import Store


def _count(store: Store) -> int:
    return sum(store.counts().values())


def _in(minutes: float) -> str:
    return (datetime.now(UTC) + timedelta(minutes=minutes)).isoformat()


def test_a_schedules_terms_are_stored_and_answered_with_its_retry_policy(
        api: httpx.Client) -> None:
    r = api.post("/v1/channels", json={"name": "patient", "kind": "recording", "config": {
        "max_lateness": 600, "retry": {"base": 2, "cap": 60, "max_attempts": 5}}})
    assert r.status_code == 201, r.text
    made = api.post("/v1/schedules", json={
        "channel": "patient", "payload": {"a": 1}, "delay": 60, "expires_at": _in(30),
        "max_lateness": "PT5M", "retry": {"max_attempts": 3, "jitter": 0.1,
                                          "max_retry_duration": 3600}})
    assert made.status_code == 201, made.text
    got = api.get(f"/v1/schedules/{made.json()['id']}").json()
    assert got["expires_at"].endswith("Z") and got["max_lateness"] == 300.0
    assert got["retry"] == {"max_attempts": 3, "jitter": 0.1, "max_retry_duration": 3600.0}
    # the schedule's own over its channel's over the dispatcher's settings
    assert got["retry_policy"] == {"max_attempts": 3, "base": 2.0, "cap": 60.0,
                                   "multiplier": 2.0, "jitter": 0.1,
                                   "max_retry_duration": 3600.0}
    plain = api.post("/v1/schedules", json={"channel": "patient", "payload": 1, "delay": 60})
    got = api.get(f"/v1/schedules/{plain.json()['id']}").json()
    assert (got["expires_at"], got["max_lateness"], got["retry"]) == (None, None, None)
    assert got["retry_policy"]["max_attempts"] == 5 and got["retry_policy"]["base"] == 2.0


def test_a_key_repeated_with_the_same_terms_is_a_repeat_and_with_others_a_conflict(
        api: httpx.Client) -> None:
    body = {"channel": "out", "payload": 1, "delay": 60, "key": "terms-key",
            "max_lateness": 30}
    first = api.post("/v1/schedules", json=body)
    assert first.status_code == 201
    assert api.post("/v1/schedules", json=body).status_code == 200
    assert api.post("/v1/schedules", json=body | {"max_lateness": 31}).status_code == 409


@pytest.mark.parametrize(("extra", "field", "words"), [
    ({"retry": {"jitter": 2}}, "retry.jitter", "less than or equal to 1"),
    ({"retry": {"max_attempts": 0}}, "retry.max_attempts", "greater than or equal to 1"),
    ({"retry": {"multiplier": 0.5}}, "retry.multiplier", "greater than or equal to 1"),
    ({"retry": {"base": 10, "cap": 5}}, "retry.cap", "less than base"),
    ({"retry": {"base": "soon"}}, "retry.base", "not an ISO 8601 duration"),
    ({"retry": {"max_retry_duration": 0}}, "retry.max_retry_duration", "more than 0"),
    ({"retry": {"tries": 3}}, "retry.tries", "Extra inputs"),
    ({"max_lateness": 0}, "max_lateness", "more than 0"),
    ({"max_lateness": True}, "max_lateness", "not a boolean"),
    ({"expires_at": "2030-01-01T00:00:00"}, "expires_at", "naive"),
    ({"expires_at": "2001-01-01T00:00:00Z"}, "expires_at", "after the due time"),
    ({"body": "xml"}, "body", "'envelope'"),
    ({"method": "GET"}, "method", "'POST'"),
    ({"path": "evil.example/x"}, "path", "must start with"),
    ({"path": "//evil.example/x"}, "path", "must start with"),
    ({"path": "/a b"}, "path", "a space"),
])
def test_bad_terms_are_refused_naming_the_field(api: httpx.Client, api_store: Store,
                                                extra: dict[str, Any], field: str,
                                                words: str) -> None:
    before = _count(api_store)
    r = api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 60, **extra})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field and words in error["message"], error
    assert _count(api_store) == before


@pytest.mark.parametrize(("config", "field"), [
    ({"max_lateness": "soon"}, "config.max_lateness"),
    ({"max_lateness": -1}, "config.max_lateness"),
    ({"retry": {"jitter": 5}}, "config.retry.jitter"),
    ({"retry": {"base": "PT1S"}}, "config.retry.base"),
    ({"retry": 3}, "config.retry"),
    ({"body": "xml"}, "config.body"),
])
def test_bad_channel_terms_are_refused_naming_the_field(api: httpx.Client,
                                                        config: dict[str, Any],
                                                        field: str) -> None:
    r = api.post("/v1/channels", json={"name": "bad-terms", "kind": "recording",
                                       "config": config})
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"] == field
    assert api.get("/v1/channels/bad-terms").status_code == 404


def test_a_schedules_body_method_and_path_are_answered(api: httpx.Client) -> None:
    made = api.post("/v1/schedules", json={
        "channel": "out", "payload": 1, "delay": 60, "body": "cloudevents_binary",
        "method": "PUT", "path": "/orders/42?x=1"})
    assert made.status_code == 201, made.text
    got = api.get(f"/v1/schedules/{made.json()['id']}").json()
    assert (got["body"], got["method"], got["path"]) == (
        "cloudevents_binary", "PUT", "/orders/42?x=1")
    bad = api.post("/v1/channels", json={"name": "h", "kind": "webhook", "config": {
        "url": "http://127.0.0.1:9/x", "method": "GET"}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "config.method"


def test_a_recurring_schedule_takes_terms_for_its_firings(api: httpx.Client) -> None:
    r = api.post("/v1/recurring", json={"channel": "out", "payload": {"tick": 1},
                                        "cron": "0 9 * * *", "max_lateness": 120,
                                        "retry": {"max_attempts": 2}})
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["max_lateness"] == 120.0 and made["retry"] == {"max_attempts": 2}
    changed = api.patch(f"/v1/recurring/{made['id']}", json={"max_lateness": None}).json()
    assert changed["max_lateness"] is None and changed["retry"] == {"max_attempts": 2}
    bad = api.post("/v1/recurring", json={"channel": "out", "payload": 1, "cron": "* * * * *",
                                          "retry": {"jitter": -1}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "retry.jitter"


def test_bulk_re_drive_takes_a_status(api: httpx.Client) -> None:
    done = api.post("/v1/schedules/redrive", json={"status": "EXPIRED", "channel": "out"})
    assert done.status_code == 200 and done.json() == {"redriven": 0}
    bad = api.post("/v1/schedules/redrive", json={"status": "PENDING"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "status"


def test_an_events_channel_must_exist_in_the_tenant(api: httpx.Client) -> None:
    bad = api.post("/v1/channels", json={"name": "told", "kind": "recording",
                                         "config": {"events": "nowhere"}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "config.events"
    assert api.post("/v1/channels", json={"name": "told", "kind": "recording",
                                          "config": {"events": "out"}}).status_code == 201


def test_a_tenants_events_channel_must_exist(api: httpx.Client) -> None:
    bad = api.put("/v1/tenants/default", json={"events": "nowhere"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "events"
    ok = api.put("/v1/tenants/default", json={"events": "out"})
    assert ok.status_code == 200 and ok.json()["events"] == "out"
    assert api.put("/v1/tenants/default", json={}).json()["events"] is None

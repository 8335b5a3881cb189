"""Recurring schedules, policies and token release over real HTTP, on both stores."""

from __future__ import annotations

import itertools
import time
from datetime import datetime
from typing import Any

import httpx
import pytest

from tocsin.abc import Store


def _create(api: httpx.Client, **body: Any) -> httpx.Response:
    return api.post("/v1/recurring", json={"channel": "out", "payload": {"tick": 1},
                                           "cron": "30 2 * * *", **body})


def test_create_get_next_in_the_zone(api: httpx.Client) -> None:
    r = _create(api, timezone="Europe/Berlin", count=3, stagger="PT1M", misfire="skip",
                start="2030-03-30T00:00:00Z")
    assert r.status_code == 201, r.text
    made = r.json()
    assert made["id"].startswith("rec-") and made["state"] == "ACTIVE"
    assert (made["count"], made["stagger"], made["misfire"]) == (3, 60.0, "skip")
    assert made["next_firing_at"] == "2030-03-30T01:30:00.000Z"  # 02:30 CET
    assert api.get(f"/v1/recurring/{made['id']}").json() == made
    nxt = api.get(f"/v1/recurring/{made['id']}/next", params={"n": 3}).json()
    # 2030-03-31 is Berlin's spring-forward day: 02:30 does not exist and fires at 03:00.
    assert nxt == {"timezone": "Europe/Berlin", "paused": False, "items": [
        {"local": "2030-03-30T02:30:00+01:00", "utc": "2030-03-30T01:30:00Z"},
        {"local": "2030-03-31T03:00:00+02:00", "utc": "2030-03-31T01:00:00Z"},
        {"local": "2030-04-01T02:30:00+02:00", "utc": "2030-04-01T00:30:00Z"}]}


def test_every_with_jitter_is_absolute_time_across_dst(api: httpx.Client,
                                                       api_store: Store) -> None:
    r = api.post("/v1/recurring", json={
        "channel": "out", "payload": {"tick": 1}, "every": "P1D", "jitter": "PT5M",
        "anchor": "2030-10-26T07:00:00Z", "timezone": "Europe/Berlin"})
    assert r.status_code == 201, r.text
    made = r.json()
    assert (made["cron"], made["every"], made["anchor"], made["jitter"]) == (
        None, "P1D", "2030-10-26T07:00:00.000Z", 300.0)
    assert api.get(f"/v1/recurring/{made['id']}").json() == made
    stored = api_store.get_recurring(made["id"])
    assert (stored.trigger.every_ms, stored.jitter_ms) == (86_400_000, 300_000)  # type: ignore[union-attr]
    # firings before the anchor count too; 200 days from now cross a change of Berlin's
    # clocks: every one is 24 h after the one before, 07:00 UTC, read 08:00 or 09:00 locally
    nxt = api.get(f"/v1/recurring/{made['id']}/next", params={"n": 200}).json()["items"]
    utc = [datetime.fromisoformat(i["utc"]) for i in nxt]
    assert {(b - a).total_seconds() for a, b in itertools.pairwise(utc)} == {86_400}
    assert {t.hour for t in utc} == {7}
    assert {datetime.fromisoformat(i["local"]).hour for i in nxt} == {8, 9}
    # PATCH back to a cron rule, and on to an interval again
    r = api.patch(f"/v1/recurring/{made['id']}", json={"cron": "0 9 * * *"})
    assert (r.json()["cron"], r.json()["every"], r.json()["jitter"]) == ("0 9 * * *", None,
                                                                          300.0)
    r = api.patch(f"/v1/recurring/{made['id']}", json={"every": 90})
    assert (r.json()["cron"], r.json()["every"]) == (None, "PT1M30S")


def test_patch_pause_resume_delete(api: httpx.Client, api_store: Store) -> None:
    rid = _create(api).json()["id"]
    r = api.patch(f"/v1/recurring/{rid}", json={"cron": "0 9 * * MON-FRI",
                                                "timezone": "America/New_York"})
    assert r.status_code == 200, r.text
    assert (r.json()["cron"], r.json()["timezone"], r.json()["revision"]) == (
        "0 9 * * MON-FRI", "America/New_York", 1)
    assert datetime.fromisoformat(r.json()["next_firing_at"]).minute == 0
    paused = api.post(f"/v1/recurring/{rid}/pause").json()
    assert paused["state"] == "PAUSED" and paused["next_firing_at"] is None
    assert api.post(f"/v1/recurring/{rid}/resume").json()["state"] == "ACTIVE"
    ids = [x["id"] for x in api.get("/v1/recurring", params={"limit": 1000}).json()["items"]]
    assert rid in ids
    assert api.delete(f"/v1/recurring/{rid}").status_code == 204
    assert api.get(f"/v1/recurring/{rid}").status_code == 404
    assert api.get(f"/v1/recurring/{rid}/firings").status_code == 404


@pytest.mark.parametrize(("body", "field", "words"), [
    ({"cron": "61 * * * *"}, "cron", "minute"),
    ({"cron": "* * * *"}, "cron", "5 fields"),
    ({"cron": "0 0 31 2 MON-FRI-SUN"}, "cron", "day-of-week"),
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown IANA time zone"),
    ({"count": 0}, "count", "greater than or equal to 1"),
    ({"count": -3}, "count", "greater than or equal to 1"),
    ({"policy": "nope"}, "policy", "not registered"),
    ({"channel": "nope"}, "channel", "not registered"),
    ({"stagger": "-PT1M"}, "stagger", "ISO 8601"),
    ({"misfire": "sometimes"}, "misfire", "fire_once"),
    ({"start": "2030-01-01T00:00:00"}, "start", "naive"),
    ({"every": "PT1H"}, "every", "not both"),
    ({"cron": None, "every": "P1M"}, "every", "ISO 8601"),
    ({"cron": None, "every": 0.5}, "every", "at least 1 s"),
    ({"cron": None}, "cron", "give a cron rule, or every"),
    ({"anchor": "2030-01-01T00:00:00Z"}, "anchor", "every rule"),
    ({"jitter": "P2D"}, "jitter", "must be 0 to 86400 s"),
])
def test_bad_input_names_the_field_and_stores_nothing(api: httpx.Client, api_store: Store,
                                                      body: dict[str, Any], field: str,
                                                      words: str) -> None:
    before = len(api_store.list_recurring(limit=10_000))
    r = _create(api, **body)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["field"] == field, error
    assert words in error["message"] or words in str(error), error
    assert len(api_store.list_recurring(limit=10_000)) == before


def test_policies_and_release(api: httpx.Client, api_store: Store) -> None:
    r = api.post("/v1/policies", json={"name": "api-p", "max_in_flight": 2, "rate": 10,
                                       "token_lease": "PT30S"})
    assert r.status_code == 201, r.text
    assert r.json() == {"name": "api-p", "tenant": "default", "max_in_flight": 2, "rate": 10.0,
                        "token_lease": 30.0, "in_flight": 0}
    for bad, field in (({"name": "x", "max_in_flight": 0}, "max_in_flight"),
                       ({"name": "x y", "max_in_flight": 1}, "name"),
                       ({"name": "x", "max_in_flight": 1, "rate": -1}, "rate"),
                       ({"name": "x", "max_in_flight": 1, "token_lease": "soon"},
                        "token_lease")):
        answer = api.post("/v1/policies", json=bad)
        assert answer.status_code == 422 and answer.json()["error"]["field"] == field, bad
    assert api.get("/v1/policies/x").status_code == 404
    sched = api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 0,
                                            "policy": "api-p"})
    assert sched.status_code == 201, sched.text
    unknown = api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 0,
                                              "policy": "nope"})
    assert unknown.status_code == 422 and unknown.json()["error"]["field"] == "policy"
    assert api.delete("/v1/policies/api-p").status_code == 409  # a schedule waits on it
    sid = sched.json()["id"]
    bucket = api_store.get(sid).bucket
    now = time.time_ns() // 1_000_000
    [row] = [x for x in api_store.claim(epoch=api_store.next_epoch(), bucket_lo=bucket,
                                        bucket_hi=bucket, until_ms=now, now_ms=now,
                                        lease_ms=60_000, limit=100) if x.id == sid]
    assert api.get("/v1/policies/api-p").json()["in_flight"] == 1
    released = api.post(f"/v1/deliveries/{sid}-1/release")
    assert released.status_code == 200 and released.json()["released"] is True
    assert api.get("/v1/policies/api-p").json()["in_flight"] == 0
    again = api.post(f"/v1/deliveries/{sid}-1/release")
    assert again.status_code == 404 and "token" in again.json()["error"]["message"]
    assert row.attempt == 1


def test_tenants(api: httpx.Client) -> None:
    assert api.get("/v1/tenants/acme").json() == {"name": "acme", "durability": "strict",
                                                  "weight": 1, "events": None,
                                                  "configured": False}
    r = api.put("/v1/tenants/acme", json={"durability": "relaxed"})
    assert r.status_code == 200 and r.json()["durability"] == "relaxed"
    assert {"name": "acme", "durability": "relaxed", "weight": 1, "events": None,
            "configured": True} in \
        api.get("/v1/tenants").json()["items"]
    r = api.put("/v1/tenants/acme", json={"durability": "relaxed", "weight": 3})
    assert r.status_code == 200 and api.get("/v1/tenants/acme").json()["weight"] == 3
    for weight in (0, 101, "heavy"):
        bad = api.put("/v1/tenants/acme", json={"weight": weight})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "weight"
    bad = api.put("/v1/tenants/acme", json={"durability": "sometimes"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "durability"
    assert api.put("/v1/tenants/a b", json={"durability": "strict"}).status_code == 422
    assert api.get("/v1/tenants/acme").json()["durability"] == "relaxed"


def test_the_schema_lists_the_misfire_policies_from_their_enum() -> None:
    from tocsin.domain import MisfirePolicy
    from tocsin.validation.models import RecurringIn

    schema = RecurringIn.model_json_schema()
    misfire = schema["$defs"]["MisfirePolicy"]["enum"]
    assert misfire == [m.value for m in MisfirePolicy]

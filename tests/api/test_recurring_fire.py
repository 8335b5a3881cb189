"""Issue 42: trigger a recurring schedule now, and backfill a past range, over real HTTP on
both stores: a trigger is a firing of its own; a backfill fires each firing of the range the
store holds no message of, once, and refuses a range over the cap."""

from __future__ import annotations

import time
from typing import Any

import httpx

from tocsin.abc import Store
from tocsin.clock import iso_ms

HOUR_MS = 3_600_000


def _rule(api: httpx.Client, **body: Any) -> str:
    r = api.post("/v1/recurring", json={"channel": "out", "payload": {"tick": 1}, **body})
    assert r.status_code == 201, r.text
    return str(r.json()["id"])


def _messages(store: Store, rule_id: str) -> dict[int, list[str]]:
    rows = store._rows(  # type: ignore[attr-defined]
        "SELECT firing_ms, id FROM schedules WHERE recurring_id = ?", (rule_id,))
    found: dict[int, list[str]] = {}
    for firing_ms, ident in rows:
        found.setdefault(int(firing_ms), []).append(str(ident))
    return found


def test_a_trigger_fires_once_now_as_a_firing_of_its_own(api: httpx.Client,
                                                         api_store: Store) -> None:
    rule = _rule(api, cron="0 0 1 1 *", count=2, stagger="PT10S", paused=True)
    before = int(time.time() * 1000)
    r = api.post(f"/v1/recurring/{rule}/trigger")
    assert r.status_code == 200, r.text
    fired = r.json()
    assert fired["messages"] == 2 and fired["firing_id"].startswith(f"{rule}.trigger:")
    [(firing_ms, ids)] = _messages(api_store, rule).items()
    assert firing_ms >= before and sorted(ids) == [f"{fired['firing_id']}:0",
                                                   f"{fired['firing_id']}:1"]
    due = sorted(api_store.get(i).due_ms for i in ids)
    assert due[1] - due[0] == 5_000 and due[0] - firing_ms < 60_000  # due now, staggered
    firings = api.get(f"/v1/recurring/{rule}/firings").json()["items"]
    assert [(f["firing_at"], f["outcome"]) for f in firings] == [(iso_ms(firing_ms),
                                                                   "expanded")]
    assert api.post(f"/v1/recurring/{rule}/trigger").json()["messages"] == 2  # another firing
    assert len(_messages(api_store, rule)) == 2
    assert api.post("/v1/recurring/rec-nope/trigger").status_code == 404


def test_a_backfill_fires_each_missed_firing_once(api: httpx.Client, api_store: Store) -> None:
    now = int(time.time() * 1000)
    anchor = now - now % HOUR_MS
    rule = _rule(api, every="PT1H", anchor=iso_ms(anchor), count=3)
    start, end = iso_ms(anchor - 10 * HOUR_MS), iso_ms(anchor - HOUR_MS)
    r = api.post(f"/v1/recurring/{rule}/backfill", json={"from": start, "to": end})
    assert r.status_code == 200, r.text
    assert r.json() == {"id": rule, "firings": 9, "messages": 27, "already": 0}
    found = _messages(api_store, rule)
    assert sorted(found) == [anchor - k * HOUR_MS for k in range(10, 1, -1)]
    assert {len(ids) for ids in found.values()} == {3}
    again = api.post(f"/v1/recurring/{rule}/backfill",
                     json={"from": iso_ms(anchor - 12 * HOUR_MS), "to": end}).json()
    assert (again["firings"], again["already"]) == (2, 9)  # only the two new ones
    assert len(_messages(api_store, rule)) == 11
    firings = api.get(f"/v1/recurring/{rule}/firings").json()["items"]
    assert len(firings) == 11 and {f["outcome"] for f in firings} == {"expanded"}


def test_a_backfill_past_the_cap_or_into_the_future_is_refused(api: httpx.Client,
                                                                api_store: Store) -> None:
    now = int(time.time() * 1000)
    rule = _rule(api, every="PT1M", anchor="2020-01-01T00:00:00Z")
    wide = api.post(f"/v1/recurring/{rule}/backfill",
                    json={"from": iso_ms(now - 2 * 86_400_000), "to": iso_ms(now - HOUR_MS)})
    assert wide.status_code == 422, wide.text
    assert wide.json()["error"]["field"] == "to" and "more than 1000 firings" in wide.text
    ahead = api.post(f"/v1/recurring/{rule}/backfill",
                     json={"from": iso_ms(now - HOUR_MS), "to": iso_ms(now + HOUR_MS)})
    assert ahead.status_code == 422 and ahead.json()["error"]["field"] == "to", ahead.text
    backwards = api.post(f"/v1/recurring/{rule}/backfill",
                         json={"from": iso_ms(now - HOUR_MS), "to": iso_ms(now - 2 * HOUR_MS)})
    assert backwards.status_code == 422 and backwards.json()["error"]["field"] == "from"
    assert _messages(api_store, rule) == {}  # nothing written

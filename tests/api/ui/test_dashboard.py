"""The dashboard over a real API server and store (HTTP, as a browser's requests would be):
sign-in cookie, every page, re-drive, pause/resume, CSRF and tenant scoping."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tocsin.api.ui.session import COOKIE, csrf_token
from tocsin.apikeys.tokens import issue_key
from tocsin.domain import Ack, ChannelKind, ChannelSpec, NewSchedule, Outcome, Role, Status
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer

PAGES = ["/ui", "/ui/fragments/overview", "/ui/schedules", "/ui/dead", "/ui/channels",
         "/ui/keys", "/ui/recurring", "/ui/policies", "/ui/audit"]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    tmp = tmp_path_factory.mktemp("ui")
    store = SQLiteStore(tmp / "t.db", buckets=8)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                  config={"path": str(tmp / "out.jsonl")}))
    store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK, config={
        "url": "https://example.com/x", "headers": {"Authorization": "Bearer s3cret"}}))
    served = ApiServer(store).start()
    yield served
    served.stop()


def _browser(server: ApiServer, key: str | None) -> httpx.Client:
    client = httpx.Client(base_url=server.url, timeout=30)
    if key is not None:
        r = client.post("/ui/login", json={"key": key})
        assert r.status_code == 200 and r.headers.get("hx-redirect") == "/ui", r.text
        cookie = r.headers["set-cookie"].lower()
        assert "httponly" in cookie and "samesite=strict" in cookie and "path=/ui" in cookie
        assert key not in cookie, "the cookie holds a session, never the API key"
    return client


def _csrf(client: httpx.Client) -> dict[str, str]:
    """The CSRF header of ``client``'s session (what a page's htmx sends)."""
    return {"X-CSRF-Token": csrf_token(client.cookies[COOKIE])}


def _dead(store: SQLiteStore, tenant: str = "default", channel: str = "out") -> str:
    now = time.time_ns() // 1_000_000
    [(s, _)] = store.create([NewSchedule(channel=channel, payload=b"{}", due_ms=now,
                                         tenant=tenant)], now_ms=now)
    [row] = [r for r in store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=7,
                                    until_ms=now, now_ms=now, lease_ms=60_000, limit=1000)
             if r.id == s.id]
    store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
        schedule_id=s.id, delivery_id=f"{s.id}-1", attempt=1, outcome=Outcome.REJECTED,
        error="refused for good", started_ms=now, ended_ms=now, due_ms=now,
        status=Status.DEAD)])
    return s.id


def test_without_a_key_every_page_sends_to_the_login(server: ApiServer) -> None:
    anon = _browser(server, None)
    for page in ["/ui", "/ui/dead", "/ui/channels"]:
        r = anon.get(page, follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/ui/login"
    assert "API key" in anon.get("/ui/login").text
    bad = anon.post("/ui/login", json={"key": "tsk_nope"})
    assert "Unknown or revoked" in bad.text and "set-cookie" not in bad.headers
    assert anon.get("/ui/static/htmx.min.js").status_code == 200


def test_each_page_loads_and_secrets_stay_redacted(server: ApiServer) -> None:
    sid = _dead(server.store)
    ui = _browser(server, server.admin_key)
    for page in PAGES:
        r = ui.get(page)
        assert r.status_code == 200, (page, r.text)
    assert sid in ui.get("/ui/dead").text
    assert "refused for good" in ui.get(f"/ui/schedules/{sid}").text
    assert sid in ui.get("/ui/schedules", params={"status": "DEAD"}).text
    channels = ui.get("/ui/channels").text
    assert "hook" in channels and "s3cret" not in channels


def test_the_schedule_list_is_by_due_time_latest_first_and_the_sort_is_selectable(
        server: ApiServer) -> None:
    now = time.time_ns() // 1_000_000
    made = [s for s, _ in server.store.create(
        [NewSchedule(channel="out", payload=b"{}", due_ms=now + due, tenant="sorting")
         for due in (3_600_000, 86_400_000, 60_000)], now_ms=now)]
    ui = _browser(server, server.admin_key)

    def shown(**params: str) -> list[str]:
        page = ui.get("/ui/schedules", params={"tenant": "sorting", **params}).text
        return sorted((s.id for s in made if s.id in page), key=page.index)

    tomorrow, in_an_hour, in_a_minute = made[1].id, made[0].id, made[2].id
    assert shown() == [tomorrow, in_an_hour, in_a_minute]  # due time, latest first
    assert shown(sort="id") == sorted(s.id for s in made)  # id (creation) order
    assert 'value="activity"' in ui.get("/ui/schedules").text
    assert "not a valid" in ui.get("/ui/schedules", params={"sort": "nonsense"}).text


def test_redrive_and_pause_need_the_csrf_token(server: ApiServer) -> None:
    sid = _dead(server.store)
    ui = _browser(server, server.admin_key)
    refused = ui.post(f"/ui/schedules/{sid}/redrive")
    assert refused.status_code == 403 and server.store.get(sid).status is Status.DEAD
    token = _csrf(ui)
    cross = ui.post(f"/ui/schedules/{sid}/redrive",
                    headers={**token, "Origin": "https://evil.example"})
    assert cross.status_code == 403 and server.store.get(sid).status is Status.DEAD
    done = ui.post(f"/ui/schedules/{sid}/redrive", headers=token)
    assert done.status_code == 200 and done.headers["hx-refresh"] == "true"
    assert server.store.get(sid).status is Status.PENDING
    others = [_dead(server.store, channel="bulk") for _ in range(2)]
    bulk = ui.post("/ui/dead/redrive", json={"channel": "bulk", "limit": "10"}, headers=token)
    assert "2 dead schedules re-driven" in bulk.text
    assert {server.store.get(i).status for i in others} == {Status.PENDING}
    assert ui.post("/ui/channels/pause", json={"name": "out"}, headers=token).status_code == 200
    assert [p.name for p in server.store.paused_channels()] == ["out"]
    assert "Resume" in ui.get("/ui/channels").text
    assert ui.post("/ui/channels/resume", json={"name": "out"},
                   headers=token).status_code == 200
    assert server.store.paused_channels() == []


def test_a_tenant_key_sees_only_its_tenant(server: ApiServer, tmp_path: Path) -> None:
    mine, theirs = _dead(server.store, "acme"), _dead(server.store, "globex")
    key = issue_key(server.store, role=Role.TENANT, tenant="acme", now_ms=0)[1]
    ui = _browser(server, key)
    dead = ui.get("/ui/dead").text
    assert mine in dead and theirs not in dead
    token = _csrf(ui)
    assert ui.post(f"/ui/schedules/{theirs}/redrive", headers=token).status_code == 404
    assert server.store.get(theirs).status is Status.DEAD
    ro = issue_key(server.store, role=Role.TENANT, tenant="acme", read_only=True, now_ms=0)[1]
    viewer = _browser(server, ro)
    assert viewer.get("/ui/dead").status_code == 200
    assert viewer.post(f"/ui/schedules/{mine}/redrive",
                       headers=_csrf(viewer)).status_code == 403
    assert server.store.get(mine).status is Status.DEAD


def test_the_last_hour_per_minute_counts_what_finished(server: ApiServer) -> None:
    store, tenant = server.store, "minutes"
    now = time.time_ns() // 1_000_000
    made = [s.id for s, _ in store.create(
        [NewSchedule(channel="out", payload=b"{}", due_ms=now + 600_000, tenant=tenant)
         for _ in range(3)], now_ms=now)]
    store.cancel(made[0], now_ms=now, tenant=tenant)
    store.cancel(made[1], now_ms=now, tenant=tenant)
    _dead(store, tenant)
    key = issue_key(store, role=Role.TENANT, tenant=tenant, now_ms=0)[1]
    page = _browser(server, key).get("/ui/fragments/history").text
    assert '<b id="hour-cancelled">2</b>' in page and '<b id="hour-dead">1</b>' in page
    assert '<b id="hour-delivered">0</b>' in page
    assert page.count('class="minute"') == 60
    other = _browser(server, server.admin_key).get("/ui/fragments/history").text
    assert 'id="hour-cancelled"' in other  # an admin sees every tenant's


def test_the_channels_page_shows_an_open_breaker_in_flight_and_lateness(
        server: ApiServer) -> None:
    from tocsin.abc import ChannelHold
    from tocsin.domain import Ack, Outcome

    store, now = server.store, 1_900_000_000_000
    store.acknowledge(epoch=1, now_ms=now, acks=[Ack(
        schedule_id=f"x{i}", delivery_id=f"x{i}-1", attempt=1, outcome=Outcome.DELIVERED,
        error=None, started_ms=now, ended_ms=now + late, due_ms=now, status=Status.DELIVERED,
        tenant="default", channel="hook") for i, late in enumerate([3, 4, 4, 900])])
    store.hold_channel(ChannelHold("default", "hook", "open", now, now + 5_000, 5,
                                   "HTTP 503 Service Unavailable"))
    try:
        page = _browser(server, server.admin_key).get("/ui/channels").text
    finally:
        store.unhold_channel("default", "hook")
    assert "breaker open" in page and "after 5 failures" in page and "HTTP 503" in page
    assert "≤ 5 ms / ≤ 1 s" in page  # per destination, buckets fine enough for milliseconds


def test_the_overview_lists_the_dispatchers_and_the_buckets_each_owns(
        server: ApiServer) -> None:
    store, now = server.store, 1_900_000_000_000
    for run, pid in (("run-one", 101), ("run-two", 202)):
        store.join_run(run, now_ms=now, host="node-a", pid=pid, stale_ms=2**40)
        store.beat_run(run, now_ms=now, ready=True)
    store.share_buckets(now_ms=now, stale_ms=2**40)
    try:
        page = _browser(server, server.admin_key).get("/ui/fragments/overview").text
        status = httpx.get(f"{server.url}/v1/status", headers=server.headers).json()
    finally:
        for run in ("run-one", "run-two"):
            store.end_run(run, now_ms=now)
    assert 'id="dispatchers"' in page and "run-one" in page and "node-a" in page
    assert "0-3" in page and "4-7" in page  # eight buckets, shared in two ranges
    listed = {d["run"]: d for d in status["dispatchers"]}
    assert (listed["run-one"]["host"], listed["run-one"]["pid"]) == ("node-a", 101)
    assert listed["run-one"]["buckets"] == ["0-3"] and listed["run-two"]["buckets"] == ["4-7"]
    assert listed["run-two"]["owns_since"] and listed["run-two"]["ready"] is True

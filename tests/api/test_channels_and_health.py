"""Channel registration, health, readiness and metrics over real HTTP."""

from __future__ import annotations

import time

import httpx

from tests.support.api_server import ApiServer
from tocsin.abc import Store
from tocsin.config import Settings


def test_channel_crud(api: httpx.Client, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = str(tmp_path / "c.jsonl")
    r = api.post("/v1/channels", json={"name": "billing", "kind": "file",
                                       "config": {"path": path}})
    assert r.status_code == 201
    assert api.get("/v1/channels/billing").json() == {"name": "billing", "kind": "file",
                                                      "config": {"path": path}}
    assert "billing" in {c["name"] for c in api.get("/v1/channels").json()["items"]}
    assert api.delete("/v1/channels/billing").status_code == 204
    assert api.get("/v1/channels/billing").status_code == 404


def test_bad_channels_name_the_field(api: httpx.Client) -> None:
    r = api.post("/v1/channels", json={"name": "x", "kind": "carrier-pigeon", "config": {}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "kind"
    r = api.post("/v1/channels", json={"name": "bad name!", "kind": "file", "config": {}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name"


def test_health_and_metrics(api: httpx.Client) -> None:
    assert api.get("/healthz").json() == {"status": "ok"}
    assert api.get("/readyz").status_code == 200
    api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 600})
    text = api.get("/metrics").text
    assert 'tocsin_schedules{status="PENDING"}' in text
    assert "tocsin_due_backlog" in text


def test_readyz_wants_a_recent_dispatcher_heartbeat(api_store: Store) -> None:
    server = ApiServer(api_store, Settings(), expect_dispatcher=True).start()
    try:
        url = f"{server.url}/readyz"
        stale = time.time_ns() // 1_000_000 - 60_000
        api_store.beat("dispatcher", now_ms=stale)
        api_store.beat("dispatcher-source", now_ms=stale)
        r = httpx.get(url)
        assert r.status_code == 503 and "dispatcher" in r.json()["problems"][0]
        api_store.beat("dispatcher-source", now_ms=time.time_ns() // 1_000_000)
        assert httpx.get(url).status_code == 200
    finally:
        server.stop()

"""Issue 40, finding 4, over real HTTP on both stores: concurrent creates cannot pass the rule
cap together (cap 3 became 24 rules), and a tenant's channels are capped."""

from __future__ import annotations

import itertools
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, cast

import httpx

from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Role
from tocsin.testing.api_server import ApiServer

_RUNS = itertools.count()


def _tenant_client(api_store: Store, server: ApiServer, name: str) -> httpx.Client:
    tenant = f"{name}-{next(_RUNS)}"
    api_store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant=tenant))
    _, token = issue_key(api_store, role=Role.TENANT, tenant=tenant, now_ms=0)
    return httpx.Client(base_url=server.url, timeout=30,
                        headers={"authorization": f"Bearer {token}"})


class _SlowWrites:
    """The real store, with each rule write 50 ms late: the time a busy PostgreSQL or a
    network hop leaves between a cap's check and the write (where the race lies)."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def create_recurring(self, *args: Any, **kwargs: Any) -> Any:
        time.sleep(0.05)
        return self._store.create_recurring(*args, **kwargs)


def test_concurrent_rule_creates_stop_at_the_cap(api_store: Store) -> None:
    server = ApiServer(cast(Store, _SlowWrites(api_store)),
                       Settings(tenant_max_recurring=3)).start()
    try:
        with _tenant_client(api_store, server, "racer") as client:
            def create(n: int) -> int:
                return client.post("/v1/recurring", json={
                    "cron": "0 9 * * *", "channel": "out", "payload": {"n": n}}).status_code

            with ThreadPoolExecutor(24) as pool:
                statuses = list(pool.map(create, range(24)))
            assert sorted(statuses) == [201] * 3 + [429] * 21, statuses
            assert len(client.get("/v1/recurring").json()["items"]) == 3
    finally:
        server.stop()


def test_a_tenants_channels_are_capped(api_store: Store) -> None:
    server = ApiServer(api_store, Settings(tenant_max_channels=2)).start()
    try:
        with _tenant_client(api_store, server, "chan") as client:
            hook = {"kind": "webhook", "config": {"url": "http://127.0.0.1:9/in"}}
            assert client.post("/v1/channels", json={"name": "a", **hook}).status_code == 201
            third = client.post("/v1/channels", json={"name": "b", **hook})
            assert third.status_code == 429, third.text  # "out" and "a" are two
            assert "cap is 2" in third.json()["error"]["message"]
            assert client.post("/v1/channels", json={"name": "a", **hook}).status_code == 201
            assert client.get("/v1/channels/b").status_code == 404
    finally:
        server.stop()

"""Answers (security review, round two), on both stores: inputs that answered 5xx answer 4xx
naming the field; ``/metrics`` is keyed once more than one tenant exists."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from tocsin.abc import Store
from tocsin.api.errors import STORE_FAILED
from tocsin.apikeys.tokens import issue_key
from tocsin.config import Settings
from tocsin.domain import Role
from tocsin.errors import StoreError
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer

UNICODE_DIGITS = ["²", "٣", "\uff11", "1²", "-²", "PT²S", "P\u0661D"]


@pytest.mark.parametrize("value", UNICODE_DIGITS)
def test_a_stats_window_of_unicode_digits_is_a_422(api: httpx.Client, value: str) -> None:
    for field in ("window", "ahead"):
        r = api.get("/v1/stats", params={field: value})
        assert r.status_code == 422 and r.json()["error"]["field"] == field, (value, r.text)


@pytest.mark.parametrize("value", UNICODE_DIGITS)
def test_a_shift_of_unicode_digits_is_a_422(api: httpx.Client, value: str) -> None:
    r = api.post("/v1/schedules/reschedule", json={"key_prefix": "p/", "shift": value})
    assert r.status_code == 422 and r.json()["error"]["field"] == "shift", (value, r.text)


@pytest.mark.parametrize("cron", ["*/² * * * *", "0 9 * * MON#²", "² * * * *", "*/\uff11 * * * *"])
def test_a_cron_of_unicode_digits_is_a_422(api: httpx.Client, cron: str) -> None:
    r = api.post("/v1/recurring", json={"cron": cron, "channel": "out", "payload": 1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "cron", (cron, r.text)


def test_metrics_are_keyed_once_a_second_tenant_exists(api_store: Store) -> None:
    server = ApiServer(api_store, Settings()).start()
    try:
        for key in api_store.list_keys():  # the module's other tests minted tenant keys
            if key.tenant is not None:
                api_store.revoke_key(key.id, now_ms=0)
        if any(k.tenant for k in api_store.list_keys()) or any(
                c.tenant != "default" for c in api_store.list_channels()):
            pytest.skip("this module's store already holds other tenants")
        assert httpx.get(f"{server.url}/metrics").status_code == 200, "one tenant: open"
        _, tenant = issue_key(api_store, role=Role.TENANT, tenant="acme", now_ms=0)
        anon = httpx.get(f"{server.url}/metrics")
        assert anon.status_code == 401 and anon.headers["www-authenticate"].startswith("Bearer")
        acme = httpx.get(f"{server.url}/metrics", headers={"authorization": f"Bearer {tenant}"})
        assert acme.status_code == 403
        admin = httpx.get(f"{server.url}/metrics", headers=server.headers)
        assert admin.status_code == 200 and "tocsin_schedules" in admin.text
    finally:
        server.stop()
    for needs, status in ((False, 200), (True, 401)):
        again = ApiServer(api_store, Settings(metrics_needs_key=needs)).start()
        try:
            assert httpx.get(f"{again.url}/metrics").status_code == status
        finally:
            again.stop()


class _BrokenStore(SQLiteStore):
    """A store whose reads fail with the text a database gives (a file, a host)."""

    def get(self, schedule_id: str, *, tenant: str | None = None) -> Any:
        raise StoreError(f"sqlite {self.path}: disk I/O error")

    def list_channels(self, *, tenant: str | None = None) -> Any:
        raise StoreError("connection to server at \"db.internal\" (10.1.2.3), port 5432 failed")


def test_a_store_failure_answers_503_without_its_files_or_hosts(tmp_path: Path) -> None:
    server = ApiServer(_BrokenStore(tmp_path / "secret-place" / "t.db", buckets=4)).start()
    try:
        for path in ("/v1/schedules/x", "/v1/channels"):
            r = httpx.get(f"{server.url}{path}", headers=server.headers)
            assert r.status_code == 503 and r.json()["error"]["type"] == "StoreError"
            assert r.json()["error"]["message"] == STORE_FAILED
            assert "secret-place" not in r.text and "10.1.2.3" not in r.text
    finally:
        server.stop()

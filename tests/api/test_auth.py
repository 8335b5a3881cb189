"""Authentication at the edge: the Bearer header, and which routes stay open."""

from __future__ import annotations

import httpx
import pytest

from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.config import Settings
from tocsin.domain import Role
from tocsin.testing.api_server import ApiServer


def test_the_scheme_is_case_insensitive_and_the_token_exact(api_server: ApiServer) -> None:
    token = api_server.admin_key
    for header, status in ((f"Bearer {token}", 200), (f"bearer {token}", 200),
                           (f"BEARER  {token}", 200), (f"Bearer {token}x", 401),
                           (f"Token {token}", 401), (token, 401)):
        r = httpx.get(f"{api_server.url}/v1/channels", headers={"authorization": header})
        assert r.status_code == status, header


def test_health_docs_and_probes_are_open_by_default(api_server: ApiServer) -> None:
    for path in ("/healthz", "/readyz", "/metrics", "/openapi.json", "/docs"):
        assert httpx.get(f"{api_server.url}{path}").status_code == 200, path


def test_probes_can_ask_for_keys(api_store: Store) -> None:
    settings = Settings(readyz_needs_key=True, metrics_needs_key=True)
    server = ApiServer(api_store, settings).start()
    _, tenant = issue_key(api_store, role=Role.TENANT, tenant="acme", now_ms=0)
    as_tenant = {"authorization": f"Bearer {tenant}"}
    try:
        assert httpx.get(f"{server.url}/healthz").status_code == 200
        for path in ("/readyz", "/metrics"):
            r = httpx.get(f"{server.url}{path}")
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
            assert httpx.get(f"{server.url}{path}", headers=server.headers).status_code == 200
        assert httpx.get(f"{server.url}/readyz", headers=as_tenant).status_code == 200
        refused = httpx.get(f"{server.url}/metrics", headers=as_tenant)
        assert refused.status_code == 403, "metrics count every tenant: admin only"
    finally:
        server.stop()


@pytest.mark.parametrize("path", ["/v1/schedules", "/v1/channels", "/v1/apikeys"])
def test_an_unknown_tenant_name_is_refused_before_anything(api: httpx.Client, path: str) -> None:
    r = api.get(path, params={"tenant": "no spaces"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "tenant"

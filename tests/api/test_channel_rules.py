"""Issue 40, finding 5, over real HTTP on both stores: dead-letter cycles and dangling
dead-letter targets are refused, and the default tenant cannot take the file name
``tenants`` (in any case) where other tenants' files live."""

from __future__ import annotations

import httpx
import pytest


def _hook(name: str, dead_letter: str | None = None) -> dict[str, object]:
    config: dict[str, object] = {"path": f"{name}.jsonl"}
    if dead_letter:
        config["dead_letter"] = dead_letter
    return {"name": name, "kind": "file", "config": config}


def test_a_dead_letter_cycle_is_refused(api: httpx.Client) -> None:
    assert api.post("/v1/channels", json=_hook("dl-a")).status_code == 201
    assert api.post("/v1/channels", json=_hook("dl-b", "dl-a")).status_code == 201
    r = api.post("/v1/channels", json=_hook("dl-a", "dl-b"))  # a -> b -> a
    assert r.status_code == 422 and r.json()["error"]["field"] == "config.dead_letter"
    assert "dl-a -> dl-b -> dl-a" in r.json()["error"]["message"]
    assert "dead_letter" not in api.get("/v1/channels/dl-a").json()["config"]


def test_a_dead_letter_target_cannot_dangle(api: httpx.Client) -> None:
    assert api.post("/v1/channels", json=_hook("dl-t")).status_code == 201
    assert api.post("/v1/channels", json=_hook("dl-u", "dl-t")).status_code == 201
    r = api.delete("/v1/channels/dl-t")
    assert r.status_code == 409 and "dl-u" in r.json()["error"]["message"]
    assert api.get("/v1/channels/dl-t").status_code == 200
    assert api.post("/v1/channels", json=_hook("dl-v", "nowhere")).status_code == 422


@pytest.mark.parametrize("path", ["tenants", "TENANTS/alice/x.jsonl", "Tenants/alice/x.jsonl",
                                  "tenants/alice/x.jsonl"])
def test_the_default_tenant_cannot_take_the_tenants_folder(api: httpx.Client,
                                                           path: str) -> None:
    r = api.post("/v1/channels", json={"name": "grab", "kind": "file", "config": {"path": path}})
    assert r.status_code == 422 and r.json()["error"]["field"] == "config.path", r.text

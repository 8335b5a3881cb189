"""Channel registration over real HTTP: checked config, the usual verbs, errors naming the field."""

from __future__ import annotations

from pathlib import Path

import httpx


def test_channel_crud(api: httpx.Client, tmp_path: Path) -> None:
    path = str(tmp_path / "c.jsonl")
    r = api.post("/v1/channels", json={"name": "billing", "kind": "file",
                                       "config": {"path": path}})
    assert r.status_code == 201, r.text
    assert r.json() == {"name": "billing", "tenant": "default", "kind": "file",
                        "config": {"path": path}}
    assert api.get("/v1/channels/billing").json() == r.json()
    assert "billing" in {c["name"] for c in api.get("/v1/channels").json()["items"]}
    assert api.delete("/v1/channels/billing").status_code == 204
    assert api.get("/v1/channels/billing").status_code == 404
    gone = api.delete("/v1/channels/billing")
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "NotFoundError"


def test_registering_again_replaces(api: httpx.Client, tmp_path: Path) -> None:
    for name in ("a.jsonl", "b.jsonl"):
        body = {"name": "twice", "kind": "file", "config": {"path": str(tmp_path / name)}}
        assert api.post("/v1/channels", json=body).status_code == 201
    assert api.get("/v1/channels/twice").json()["config"]["path"].endswith("b.jsonl")


def test_a_new_channel_takes_schedules(api: httpx.Client, tmp_path: Path) -> None:
    body = {"channel": "fresh", "payload": 1, "delay": 60}
    assert api.post("/v1/schedules", json=body).status_code == 422
    api.post("/v1/channels", json={"name": "fresh", "kind": "file",
                                   "config": {"path": str(tmp_path / "f.jsonl")}})
    assert api.post("/v1/schedules", json=body).status_code == 201


def _error(r: httpx.Response) -> dict[str, object]:
    assert r.status_code == 422, r.text
    error: dict[str, object] = r.json()["error"]
    assert error["type"] == "ValidationError"
    return error


def test_bad_channels_name_the_field(api: httpx.Client) -> None:
    kind = _error(api.post("/v1/channels", json={"name": "x", "kind": "pigeon", "config": {}}))
    assert kind["field"] == "kind" and "webhook" in str(kind["message"])
    name = _error(api.post("/v1/channels", json={"name": "bad name!", "kind": "file"}))
    assert name["field"] == "name"
    missing = _error(api.post("/v1/channels", json={"kind": "file"}))
    assert missing["field"] == "name" and "required" in str(missing["reason"]).lower()


def test_bad_config_names_config_field(api: httpx.Client) -> None:
    unknown = _error(api.post("/v1/channels", json={"name": "f", "kind": "file",
                                                    "config": {"colour": "red"}}))
    assert unknown["field"] == "config.colour"
    required = _error(api.post("/v1/channels", json={"name": "k", "kind": "kafka",
                                                     "config": {}}))
    assert str(required["field"]).startswith("config.")
    assert api.get("/v1/channels/k").status_code == 404


def test_malformed_json_is_a_body_error(api: httpx.Client) -> None:
    error = _error(api.post("/v1/channels", content=b'{"name": "x",',
                            headers={"content-type": "application/json"}))
    assert error["field"] == "body" and "malformed JSON" in str(error["message"])


def test_config_text_must_be_unicode(api: httpx.Client) -> None:
    body = b'{"name": "u", "kind": "file", "config": {"path": "\\ud800"}}'
    error = _error(api.post("/v1/channels", content=body,
                            headers={"content-type": "application/json"}))
    assert error["field"] == "config.path" and "Unicode" in str(error["reason"])

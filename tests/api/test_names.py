"""Tenant and channel names (security review, round two): a tenant is a directory name below
the file roots, so ``.``, ``..`` and paths are refused on every way in (the API, ``apikeys
create --local``, a channel built for a tenant stored before the rule); a name's pattern is
matched to the end of the text (``x\\n`` is not ``x``); a ``dead_letter`` names another
existing channel of the same tenant. On both stores."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from typer.testing import CliRunner

from tests.channels.envelopes import envelopes
from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.channels import validate_channel_config
from tocsin.channels.file import FileChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.cli import app
from tocsin.domain import ChannelKind, ChannelSpec, Outcome, Role, check_tenant
from tocsin.errors import ValidationError
from tocsin.testing.api_server import ApiServer

BAD_TENANTS = [".", "..", "../../x", "a/b", ".hidden", "-x", "x\n", "a b", "é", "x" * 65]


@pytest.mark.parametrize("tenant", BAD_TENANTS)
def test_a_bad_tenant_gets_no_key_over_http(api: httpx.Client, tenant: str) -> None:
    r = api.post("/v1/apikeys", json={"role": "tenant", "tenant": tenant})
    assert r.status_code == 422 and r.json()["error"]["field"] == "tenant", r.text
    listed = api.get("/v1/schedules", params={"tenant": tenant})
    assert listed.status_code == 422 and listed.json()["error"]["field"] == "tenant"
    made = api.post("/v1/channels", json={"name": "n", "kind": "file", "tenant": tenant})
    assert made.status_code == 422 and made.json()["error"]["field"] == "tenant"


@pytest.mark.parametrize("tenant", BAD_TENANTS)
def test_a_bad_tenant_gets_no_key_in_the_store(api_store: Store, tenant: str) -> None:
    with pytest.raises(ValidationError) as refused:
        issue_key(api_store, role=Role.TENANT, tenant=tenant, now_ms=0)
    assert refused.value.field == "tenant"


@pytest.mark.parametrize("tenant", ["..", "../../x", "/etc", "x\n"])
def test_apikeys_create_local_checks_the_tenant(tmp_path: Path, tenant: str) -> None:
    env = {"TOCSIN_STORE": f"sqlite:///{tmp_path / 't.db'}", "TOCSIN_HOME": str(tmp_path),
           "TOCSIN_API_KEY": ""}
    made = CliRunner().invoke(app, ["apikeys", "create", "--local", "--tenant", tenant], env=env)
    assert made.exit_code == 1 and "tenant" in made.output, made.output
    listed = CliRunner().invoke(app, ["apikeys", "ls", "--local"], env=env)
    assert listed.exit_code == 0 and json.loads(listed.stdout) == []


def test_good_tenants_still_pass() -> None:
    for name in ("acme", "a", "A.b_c-9", "9lives", "x" * 64, "default"):
        assert check_tenant(name) == name


@pytest.mark.parametrize("tenant", ["..", ".", "../x", "x/../.."])
def test_a_stored_bad_tenant_writes_nothing(tmp_path: Path, tenant: str) -> None:
    """A channel of a tenant stored before the rule is refused at delivery, not written into
    another tenant's folder (``..`` + ``tenants/alice/out.jsonl`` was alice's file)."""
    policy = DestinationPolicy.build(file_roots=[tmp_path])
    spec = ChannelSpec(name="out", kind=ChannelKind.FILE, tenant=tenant,
                       config={"path": "tenants/alice/out.jsonl"})
    [result] = FileChannel(spec, policy=policy).send(envelopes(1))
    assert result.outcome is Outcome.REJECTED and "tenant" in (result.error or "")
    assert not any(p.is_file() for p in tmp_path.rglob("*"))
    with pytest.raises(ValidationError):
        validate_channel_config(ChannelKind.FILE, {"path": "out.jsonl"}, policy, tenant=tenant)


@pytest.mark.parametrize("name", ["x\n", "out\n", "a b", ".x", "x/y", "x" * 129, "é"])
def test_a_channel_name_is_matched_to_its_end(api: httpx.Client, name: str) -> None:
    r = api.post("/v1/channels", json={"name": name, "kind": "file"})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text
    with pytest.raises(ValidationError):
        ChannelSpec(name=name, kind=ChannelKind.FILE)


@pytest.mark.parametrize("name", ["x\n", "p\n"])
def test_a_policy_name_is_matched_to_its_end(api: httpx.Client, name: str) -> None:
    r = api.post("/v1/policies", json={"name": name, "max_in_flight": 1})
    assert r.status_code == 422 and r.json()["error"]["field"] == "name", r.text


def test_a_dead_letter_names_another_existing_channel(api: httpx.Client,
                                                      api_server: ApiServer) -> None:
    def put(name: str, dead_letter: str, tenant: str | None = None) -> httpx.Response:
        return api.post("/v1/channels", json={
            "name": name, "kind": "file", "config": {"dead_letter": dead_letter},
            **({"tenant": tenant} if tenant else {})})

    theirs = api.post("/v1/channels", json={"name": "only-b", "kind": "file",
                                            "tenant": "tenant-b"})
    assert theirs.status_code == 201, theirs.text
    for name, target, tenant in (("dl-self", "dl-self", None), ("dl-none", "nowhere", None),
                                 ("dl-bad", "x\n", None), ("dl-other", "only-b", "tenant-a")):
        r = put(name, target, tenant)
        assert r.status_code == 422 and r.json()["error"]["field"] == "config.dead_letter", \
            (name, r.text)
        assert api.get(f"/v1/channels/{name}").status_code == 404
    assert api.post("/v1/channels", json={"name": "dl-target", "kind": "file"}).status_code == 201
    assert put("dl-ok", "dl-target").status_code == 201

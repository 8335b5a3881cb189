"""The ``tocsin`` command against a real API server."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tocsin.apikeys.keyfile import write_key
from tocsin.cli import app
from tocsin.redact import MASK
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer

runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real API server over a SQLite file; the CLI finds its admin key in
    ``TOCSIN_API_KEY``, as a user's would."""
    served = ApiServer(SQLiteStore(tmp_path_factory.mktemp("cli") / "t.db", buckets=8)).start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOCSIN_API_KEY", served.admin_key)
        yield served
    served.stop()


@pytest.fixture(scope="module")
def api_url(server: ApiServer) -> str:
    return server.url


def _run(*args: str) -> dict | list:  # type: ignore[type-arg]
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)  # type: ignore[no-any-return]


def test_channels_schedule_ls_get_cancel(api_url: str, tmp_path: Path) -> None:
    out = tmp_path / "g.jsonl"
    added = _run("channels", "add", "greetings", "--kind", "file", "--path", str(out),
                 "--api", api_url)
    assert added == {"name": "greetings", "tenant": "default", "kind": "file",
                     "config": {"path": str(out)}}
    assert [c["name"] for c in _run("channels", "ls", "--api", api_url)] == ["greetings"]
    made = _run("schedule", "greetings", "--payload", '{"n": 1}', "--delay", "PT5M",
                "--header", "trace=abc", "--api", api_url)
    assert made["status"] == "PENDING"
    listed = _run("ls", "--status", "PENDING", "--api", api_url)
    assert [s["id"] for s in listed] == [made["id"]]
    shown = _run("get", made["id"], "--api", api_url)
    assert shown["schedule"]["headers"] == {"trace": "abc"} and shown["deliveries"] == []
    assert _run("cancel", made["id"], "--api", api_url)["status"] == "CANCELLED"
    again = runner.invoke(app, ["cancel", made["id"], "--api", api_url])
    assert again.exit_code == 1 and "too late" in again.output


def test_bad_input_exits_non_zero_with_the_field(api_url: str) -> None:
    result = runner.invoke(app, ["schedule", "nowhere", "--payload", "1", "--delay", "5",
                                 "--api", api_url])
    assert result.exit_code == 1 and "channel" in result.output
    result = runner.invoke(app, ["schedule", "x", "--payload", "{nope", "--delay", "5",
                                 "--api", api_url])
    assert result.exit_code == 1 and "not JSON" in result.output


def test_config_prints_the_effective_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_BUCKETS", "128")
    shown = _run("config")
    assert shown["buckets"] == 128 and shown["api_host"] == "127.0.0.1"
    assert shown["store"].startswith("sqlite:///")


def test_config_never_prints_the_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_API_KEY", "tsk_key_0123456789abcdef_" + "7" * 64)
    shown = runner.invoke(app, ["config"])
    assert shown.exit_code == 0 and "7777" not in shown.output
    assert json.loads(shown.output)["api_key"] == MASK


def test_recurring_and_policies(api_url: str, tmp_path: Path) -> None:
    _run("channels", "add", "ticks", "--kind", "file", "--path", str(tmp_path / "t.jsonl"),
         "--api", api_url)
    policy = _run("policies", "add", "gentle", "--max-in-flight", "5", "--rate", "2",
                  "--api", api_url)
    assert policy == {"name": "gentle", "tenant": "default", "max_in_flight": 5, "rate": 2.0,
                      "token_lease": 300.0, "in_flight": 0}
    made = _run("recurring", "add", "0 9 * * MON-FRI", "--channel", "ticks", "--payload",
                '{"standup": true}', "--timezone", "Asia/Kolkata", "--count", "2",
                "--policy", "gentle", "--api", api_url)
    assert (made["timezone"], made["count"], made["policy"]) == ("Asia/Kolkata", 2, "gentle")
    firings = _run("recurring", "next", made["id"], "--n", "2", "--api", api_url)
    assert [f["local"][11:] for f in firings] == ["09:00:00+05:30"] * 2
    assert _run("recurring", "pause", made["id"], "--api", api_url)["state"] == "PAUSED"
    assert _run("recurring", "resume", made["id"], "--api", api_url)["state"] == "ACTIVE"
    shown = _run("recurring", "get", made["id"], "--api", api_url)
    assert shown["recurring"]["revision"] == 2 and shown["firings"] == []
    assert [r["id"] for r in _run("recurring", "ls", "--api", api_url)] == [made["id"]]
    interval = _run("recurring", "add", "--channel", "ticks", "--every", "PT90M", "--jitter",
                    "30", "--anchor", "2030-01-01T00:00:00Z", "--api", api_url)
    assert (interval["cron"], interval["every"], interval["jitter"]) == (None, "PT1H30M", 30.0)
    busy = runner.invoke(app, ["policies", "rm", "gentle", "--api", api_url])
    assert busy.exit_code == 1 and "still named" in busy.output
    assert runner.invoke(app, ["recurring", "rm", made["id"], "--api", api_url]).exit_code == 0
    assert runner.invoke(app, ["policies", "rm", "gentle", "--api", api_url]).exit_code == 0
    assert _run("policies", "ls", "--api", api_url) == []
    bad = runner.invoke(app, ["recurring", "add", "* * *", "--channel", "ticks",
                              "--api", api_url])
    assert bad.exit_code == 1 and "cron" in bad.output
    gone = runner.invoke(app, ["release", "nothing-1", "--api", api_url])
    assert gone.exit_code == 1 and "not found" in gone.output.lower()


def test_apikeys_create_ls_revoke_through_the_api(api_url: str) -> None:
    made = runner.invoke(app, ["apikeys", "create", "--tenant", "acme", "--read-only",
                               "--name", "dash", "--api", api_url])
    assert made.exit_code == 0, made.output
    key = json.loads(made.stdout)
    assert key["token"].startswith(f"tsk_{key['id']}_") and key["read_only"] is True
    assert "not shown again" in made.stderr
    listed = _run("apikeys", "ls", "--tenant", "acme", "--api", api_url)
    assert [k["id"] for k in listed] == [key["id"]] and "token" not in listed[0]
    as_acme = runner.invoke(app, ["ls", "--api", api_url], env={"TOCSIN_API_KEY": key["token"]})
    assert as_acme.exit_code == 0 and json.loads(as_acme.stdout) == []
    assert _run("apikeys", "revoke", key["id"], "--api", api_url)["revoked_at"] is not None
    refused = runner.invoke(app, ["ls", "--api", api_url], env={"TOCSIN_API_KEY": key["token"]})
    assert refused.exit_code == 1 and "revoked" in refused.output
    bad = runner.invoke(app, ["apikeys", "create", "--role", "root", "--api", api_url])
    assert bad.exit_code == 1 and "role" in bad.output


def test_apikeys_local_bootstraps_the_first_key(server: ApiServer, api_url: str) -> None:
    assert isinstance(server.store, SQLiteStore)
    env = {"TOCSIN_STORE": f"sqlite:///{server.store.path}", "TOCSIN_API_KEY": ""}
    made = runner.invoke(app, ["apikeys", "create", "--local", "--role", "admin"], env=env)
    assert made.exit_code == 0, made.output
    token = json.loads(made.stdout)["token"]
    mine = _run("apikeys", "ls", "--api", api_url)
    assert json.loads(made.stdout)["id"] in {k["id"] for k in mine}
    as_new = runner.invoke(app, ["channels", "ls", "--api", api_url],
                           env={"TOCSIN_API_KEY": token})
    assert as_new.exit_code == 0, as_new.output
    local = runner.invoke(app, ["apikeys", "ls", "--local"], env=env)
    assert local.exit_code == 0 and "digest" not in local.stdout


def test_the_local_admin_key_is_picked_up_on_loopback(api_url: str, server: ApiServer,
                                                      tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCSIN_API_KEY")
    monkeypatch.setenv("TOCSIN_HOME", str(tmp_path))
    refused = runner.invoke(app, ["channels", "ls", "--api", api_url])
    assert refused.exit_code == 1 and "API key" in refused.output
    write_key(tmp_path / "admin.key", server.admin_key)
    assert isinstance(_run("channels", "ls", "--api", api_url), list)


def test_cancel_where_reschedule_where_and_stats(api_url: str, tmp_path: Path) -> None:
    _run("channels", "add", "camp", "--kind", "file", "--path", str(tmp_path / "c.jsonl"),
         "--api", api_url)
    made = [_run("schedule", "camp", "--payload", "{}", "--delay", "600", "--key", f"c9/{i}",
                 "--api", api_url)["id"] for i in range(3)]
    moved = _run("reschedule-where", "--key-prefix", "c9/", "--shift", "-60", "--api", api_url)
    assert moved == {"matched": 3, "rescheduled": 3, "too_late": 0, "more": False}
    got = _run("cancel-where", "--key-prefix", "c9/", "--limit", "2", "--api", api_url)
    assert got == {"matched": 2, "cancelled": 2, "too_late": 0, "more": True}
    assert _run("cancel-where", "--channel", "camp", "--api", api_url)["cancelled"] == 1
    assert {_run("get", i, "--api", api_url)["schedule"]["status"] for i in made} == {
        "CANCELLED"}
    [camp] = [c for c in _run("stats", "--window", "600", "--api", api_url)
              if c["channel"] == "camp"]
    assert (camp["pending"], camp["cancelled"]) == (0, 3)
    refused = runner.invoke(app, ["cancel-where", "--api", api_url])
    assert refused.exit_code == 1 and "selection" in refused.output

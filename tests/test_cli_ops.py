"""``tocsin status``, re-drive and pause verbs, and tables at a terminal (JSON when piped)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from tocsin.cli import app
from tocsin.cli import output as cli_output
from tocsin.domain import Ack, ChannelKind, ChannelSpec, NewSchedule, Outcome, Status
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer

runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    store = SQLiteStore(tmp_path_factory.mktemp("cli-ops") / "t.db", buckets=8)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                  config={"path": "/tmp/tocsin-cli-ops.jsonl"}))
    served = ApiServer(store).start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOCSIN_API_KEY", served.admin_key)
        env.setenv("TOCSIN_API_URL", served.url)
        yield served
    served.stop()


@pytest.fixture(autouse=True)
def _no_forced_json() -> Iterator[None]:
    yield
    cli_output.set_json(False)


def _dead(server: ApiServer) -> str:
    store = server.store
    now = time.time_ns() // 1_000_000
    [(s, _)] = store.create([NewSchedule(channel="out", payload=b"{}", due_ms=now)],
                            now_ms=now)
    [row] = [r for r in store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=7,
                                    until_ms=now, now_ms=now, lease_ms=60_000, limit=100)
             if r.id == s.id]
    store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
        schedule_id=s.id, delivery_id=f"{s.id}-1", attempt=1, outcome=Outcome.REJECTED,
        error="no", started_ms=now, ended_ms=now, due_ms=now, status=Status.DEAD)])
    return s.id


def _json(*args: str) -> object:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_piped_output_stays_json_and_status_sums_up(server: ApiServer) -> None:
    sid = _dead(server)
    assert _json("channels", "pause", "out")["paused"] is True
    status = _json("status")
    assert status["dead"] >= 1 and status["paused_channels"] == [
        {"tenant": "default", "name": "out"}]
    assert status["api"] == "ok" and status["dispatcher"]["healthy"] is False
    assert _json("redrive", sid)["status"] == "PENDING"
    assert _json("channels", "resume", "out")["was_paused"] is True
    _dead(server)
    assert _json("redrive", "--dead", "--channel", "out") == {"redriven": 1}
    bad = runner.invoke(app, ["redrive"])
    assert bad.exit_code == 2 and "give a schedule id" in bad.output


def test_a_terminal_gets_tables_unless_json_is_asked(server: ApiServer,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cli_output, "_is_terminal", lambda: True)
    table = runner.invoke(app, ["channels", "ls"])
    assert table.exit_code == 0, table.output
    assert "name" in table.output and "out" in table.output
    with pytest.raises(json.JSONDecodeError):
        json.loads(table.output)
    status = runner.invoke(app, ["status"])
    assert status.exit_code == 0 and "dispatcher" in status.output
    assert "paused channels" in status.output and "due next hour" in status.output
    forced = runner.invoke(app, ["--json", "channels", "ls"])
    assert [c["name"] for c in json.loads(forced.output)] == ["out"]


def test_status_lists_the_dispatchers_and_what_each_owns(
        capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    from tocsin.cli import output

    monkeypatch.setattr(output, "_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "300")
    output.set_json(False)
    output.render_status({"api": "ok", "store": "ok", "dispatchers": [
        {"run": "3f2a9c", "host": "node-a", "pid": 4242, "slot": 0, "ready": True,
         "buckets": ["0-31"], "owns_since": "2026-11-28T18:00:00.000Z", "age_s": 0.4},
        {"run": "77b1e0", "host": "node-b", "pid": 99, "slot": 1, "ready": False,
         "buckets": [], "owns_since": None, "age_s": 0.2}]})
    out = capsys.readouterr().out
    assert "dispatcher 3f2a9c" in out and "node-a pid 4242, buckets 0-31 since" in out
    assert "dispatcher 77b1e0" in out and "none (joining)" in out

"""Delivery terms from the Python clients (sync and async) and the CLI, against a real API
server: ``expires_at``, ``max_lateness`` and ``retry`` reach the store and come back in the
schedule's answer; a bad one is refused naming its field (the CLI: its flag)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from typer.testing import CliRunner

from tocsin.cli.app import app
from tocsin.client import AsyncClient, Client
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.errors import ValidationError
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer

runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    store = SQLiteStore(tmp_path_factory.mktemp("terms") / "t.db", buckets=8)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING,
                                  config={"retry": {"base": 3}}))
    served = ApiServer(store).start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOCSIN_API_KEY", served.admin_key)
        yield served
    served.stop()
    store.close()


def test_the_sync_client_sends_terms(server: ApiServer) -> None:
    expires = datetime.now(UTC) + timedelta(hours=1)
    with Client(server.url) as client:
        made = client.schedule("out", 1, delay=60, expires_at=expires,
                               max_lateness=timedelta(minutes=2),
                               retry={"max_attempts": 2, "cap": "PT1M", "jitter": 0.0})
        got = client.get(made["id"])
        assert got["max_lateness"] == 120.0 and got["expires_at"] is not None
        assert got["retry"] == {"max_attempts": 2, "cap": 60.0, "jitter": 0.0}
        assert got["retry_policy"]["base"] == 3.0  # the channel's
        with pytest.raises(ValidationError) as refused:
            client.schedule("out", 1, delay=60, retry={"multiplier": 0})
        assert refused.value.field == "retry.multiplier"
        rec = client.add_recurring("0 9 * * *", "out", 1, max_lateness=30,
                                   retry={"max_attempts": 4})
        assert (rec["max_lateness"], rec["retry"]) == (30.0, {"max_attempts": 4})


def test_the_async_client_sends_terms(server: ApiServer) -> None:
    async def go() -> dict[str, object]:
        async with AsyncClient(server.url) as client:
            made = await client.schedule("out", 1, delay=60, max_lateness="PT30S",
                                         retry={"max_retry_duration": 600})
            return dict(await client.get(made["id"]))

    got = asyncio.run(go())
    assert got["max_lateness"] == 30.0 and got["retry"] == {"max_retry_duration": 600.0}


def test_the_cli_sends_terms_and_names_the_flag_of_a_bad_one(server: ApiServer) -> None:
    result = runner.invoke(app, ["schedule", "out", "--payload", "1", "--delay", "60",
                                 "--max-lateness", "5m", "--retry", '{"max_attempts": 3}',
                                 "--expires-at", "2099-01-01T00:00:00Z", "--api", server.url])
    assert result.exit_code == 0, result.output
    made = json.loads(result.output)
    shown = runner.invoke(app, ["get", made["id"], "--api", server.url])
    schedule = json.loads(shown.output)["schedule"]
    assert (schedule["max_lateness"], schedule["retry"], schedule["expires_at"]) == (
        300.0, {"max_attempts": 3}, "2099-01-01T00:00:00.000Z")
    bad = runner.invoke(app, ["schedule", "out", "--payload", "1", "--delay", "60",
                              "--max-lateness", "0", "--api", server.url])
    assert bad.exit_code == 1 and "--max-lateness" in bad.output, bad.output
    rec = runner.invoke(app, ["recurring", "add", "0 9 * * *", "--channel", "out",
                              "--max-lateness", "90", "--api", server.url])
    assert rec.exit_code == 0 and json.loads(rec.output)["max_lateness"] == 90.0, rec.output

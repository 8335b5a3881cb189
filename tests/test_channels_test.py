"""``tocsin channels test NAME`` and ``POST /v1/channels/{name}/test``: one marked message sent
through a registered channel now, for every kind, against a real API server and the kinds'
real servers."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.channels.harnesses import HARNESSES, Harness, harness_for
from tocsin.cli import app
from tocsin.client import Client
from tocsin.errors import NotFoundError
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer

runner = CliRunner()


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real API server over a SQLite file that may write files under its base directory and
    reach loopback webhooks; the CLI finds its admin key in ``TOCSIN_API_KEY``."""
    base = tmp_path_factory.mktemp("probe")
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOCSIN_FILE_ROOTS", str(base))
        env.setenv("TOCSIN_WEBHOOK_ALLOW", "127.0.0.0/8")
        served = ApiServer(SQLiteStore(base / "t.db", buckets=8)).start()
        served.files = base  # type: ignore[attr-defined]
        env.setenv("TOCSIN_API_KEY", served.admin_key)
        yield served
    served.stop()


@pytest.fixture(params=list(HARNESSES))
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Harness:
    """Each kind's harness over the run's server."""
    return harness_for(request.param, request, tmp_path)


def test_a_test_message_arrives_marked_for_every_kind(server: ApiServer,
                                                      harness: Harness) -> None:
    spec = harness.spec()
    if harness.kind.value == "file":  # under the API's file root
        harness.tmp = server.files  # type: ignore[attr-defined]
        spec = harness.spec()
    with Client(server.url) as client:
        client.add_channel(spec.name, spec.kind.value, spec.config)
    result = runner.invoke(app, ["channels", "test", spec.name, "--api", server.url])
    assert result.exit_code == 0, result.output
    answer = json.loads(result.output)
    assert answer["outcome"] == "delivered" and answer["delivered"] is True
    assert answer["kind"] == harness.kind.value and answer["error"] is None
    assert answer["delivery_id"].startswith("test-") and answer["delivery_id"].endswith("-1")
    assert harness.received(spec) == [answer["delivery_id"]]


def test_a_failed_test_exits_non_zero_with_the_reason(server: ApiServer) -> None:
    from tocsin.testing.api_server import free_port

    with Client(server.url) as client:
        client.add_channel("down", "redis_streams",
                           {"url": f"redis://127.0.0.1:{free_port()}/0", "stream": "s"})
        answer = client.test_channel("down")
        assert answer["outcome"] == "retry" and "ConnectionError" in (answer["error"] or "")
        with pytest.raises(NotFoundError):
            client.test_channel("nobody")
    result = runner.invoke(app, ["channels", "test", "down", "--api", server.url])
    assert result.exit_code == 1 and json.loads(result.output)["outcome"] == "retry"

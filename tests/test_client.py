"""The Python clients against a real API server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from tests.support.api_server import ApiServer
from tocsin.client import AsyncClient, Client
from tocsin.errors import ConflictError, NotFoundError, ValidationError
from tocsin.stores.sqlite import SQLiteStore


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    base = tmp_path_factory.mktemp("client")
    server = ApiServer(SQLiteStore(base / "t.db", buckets=8)).start()
    with Client(server.url) as client:
        client.add_channel("out", "file", {"path": str(base / "out.jsonl")})
    yield server.url
    server.stop()


def test_sync_client(url: str) -> None:
    with Client(url) as client:
        made = client.schedule("out", payload={"x": 1}, delay=timedelta(minutes=5))
        assert client.get(made["id"])["payload"] == {"x": 1}
        batch = client.schedule_many([{"channel": "out", "payload": i, "delay": 60}
                                      for i in range(3)])
        assert len(batch) == 3
        assert client.cancel(made["id"])["status"] == "CANCELLED"
        with pytest.raises(ConflictError) as conflict:
            client.cancel(made["id"])
        assert conflict.value.status == "CANCELLED"
        with pytest.raises(NotFoundError):
            client.get("missing")
        with pytest.raises(ValidationError) as bad:
            client.schedule("nowhere", payload=1, delay=1)
        assert bad.value.field == "channel"
        ids = {s["id"] for s in client.list(status="PENDING", page_size=2)}
        assert {b["id"] for b in batch} <= ids
        assert client.deliveries(made["id"]) == []
        assert "out" in {c["name"] for c in client.channels()}


def test_naive_datetimes_are_refused_client_side(url: str) -> None:
    with Client(url) as client, pytest.raises(ValueError, match="naive"):
        client.schedule("out", payload=1, due_at=datetime(2030, 1, 1))  # noqa: DTZ001


def test_async_client(url: str) -> None:
    async def scenario() -> None:
        async with AsyncClient(url) as client:
            due = datetime.now(UTC) + timedelta(minutes=1)
            made = await client.schedule("out", payload_text="hi", due_at=due)
            assert (await client.get(made["id"]))["payload_text"] == "hi"
            assert (await client.cancel(made["id"]))["status"] == "CANCELLED"
            with pytest.raises(ConflictError):
                await client.cancel(made["id"])
            seen = [s async for s in client.list(status="CANCELLED")]
            assert made["id"] in {s["id"] for s in seen}

    asyncio.run(scenario())

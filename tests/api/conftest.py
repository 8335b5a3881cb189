"""One real API server per test module and backend, over a fresh store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.api_server import ApiServer
from tests.support.postgres import create_schema, drop_schema
from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.stores import open_store
from tocsin.stores.sqlite import SQLiteStore


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api_store(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The store behind the module's API server: every API test runs on both backends."""
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path_factory.mktemp("api") / "tocsin.db", buckets=16)
        yield store
        store.close()
        return
    server_url: str = request.getfixturevalue("postgres_url")
    url = create_schema(server_url)
    store = open_store(url, buckets=16)
    yield store
    store.close()
    drop_schema(server_url, url)


@pytest.fixture(scope="module")
def api(api_store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[httpx.Client]:
    """An HTTP client on a real uvicorn server with a registered file channel ``out``."""
    out: Path = tmp_path_factory.mktemp("out") / "out.jsonl"
    api_store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                      config={"path": str(out)}))
    server = ApiServer(api_store).start()
    with httpx.Client(base_url=server.url, timeout=30) as client:
        yield client
    server.stop()

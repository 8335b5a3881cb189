"""One real API server per test module and backend, over a fresh store.

``api_store`` is parametrized over SQLite and PostgreSQL (``postgres_url`` from
``tests/support/postgres.py``: skipped without a server, a failure under ``CI=true``), so every
API test runs on both.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.stores import open_store
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer
from tocsin.testing.postgres import create_schema, drop_schema

BUCKETS = 16


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def api_store(request: pytest.FixtureRequest,
              tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The store behind the module's API server: every API test runs on both backends."""
    if request.param == "sqlite":
        store: Store = SQLiteStore(tmp_path_factory.mktemp("api") / "tocsin.db", buckets=BUCKETS)
        yield store
        store.close()
        return
    server_url: str = request.getfixturevalue("postgres_url")
    url = create_schema(server_url)
    store = open_store(url, buckets=BUCKETS)
    yield store
    store.close()
    drop_schema(server_url, url)


@pytest.fixture(scope="module")
def api_server(api_store: Store, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    """A real uvicorn server on 127.0.0.1 over ``api_store``, with a file channel ``out``."""
    out: Path = tmp_path_factory.mktemp("out") / "out.jsonl"
    api_store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                      config={"path": str(out)}))
    server = ApiServer(api_store).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def api(api_server: ApiServer) -> Iterator[httpx.Client]:
    """An HTTP client on the module's server, with its admin key."""
    with httpx.Client(base_url=api_server.url, timeout=30, headers=api_server.headers) as client:
        yield client

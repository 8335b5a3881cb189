"""One real API server per test module, over a fresh store of each backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.support.api_server import ApiServer
from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.stores.sqlite import SQLiteStore


@pytest.fixture(scope="module")
def api_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """The store behind the module's API server."""
    store = SQLiteStore(tmp_path_factory.mktemp("api") / "tocsin.db", buckets=16)
    yield store
    store.close()


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

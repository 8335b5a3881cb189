"""The ``store`` fixture: every contract test runs on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tocsin.abc import Store
from tocsin.stores import open_store

BUCKETS = 16

OpenStore = Callable[..., Store]


@pytest.fixture(params=["sqlite", "postgres"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of a store that does not exist yet: a file in ``tmp_path``, or a fresh
    schema on the session's PostgreSQL server."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@pytest.fixture
def open_backend(store_url: str) -> Iterator[OpenStore]:
    """Open (create or reopen) the store at ``store_url``; closed after the test."""
    opened: list[Store] = []

    def opener(*, buckets: int = BUCKETS) -> Store:
        store = open_store(store_url, buckets=buckets)
        opened.append(store)
        return store

    yield opener
    for store in opened:
        store.close()


@pytest.fixture
def store(open_backend: OpenStore) -> Store:
    """A fresh store with 16 buckets."""
    return open_backend()

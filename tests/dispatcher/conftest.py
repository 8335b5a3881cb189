"""``backend_url``: the dispatcher tests that take it run on SQLite and on PostgreSQL."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

import pytest

from tocsin.abc import Store
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.stores import open_store


@pytest.fixture(params=["sqlite", "postgres"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for a store that does not exist yet, on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tocsin.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


class _HasLocal(Protocol):
    local: LocalDispatcher


R = TypeVar("R", bound=_HasLocal)


@contextmanager
def rig_over(backend_url: str, make: Callable[[Store], R]) -> Iterator[R]:
    """``make(store)`` over a fresh 8-bucket store at ``backend_url``; its local dispatcher and
    the store closed afterwards (the deterministic tests' rigs)."""
    store = open_store(backend_url, buckets=8)
    rig = make(store)
    try:
        yield rig
    finally:
        rig.local.close()
        store.close()

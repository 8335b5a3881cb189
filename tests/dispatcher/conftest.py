"""``backend_url``: the dispatcher tests that take it run on SQLite and on PostgreSQL."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(params=["sqlite", "postgres"])
def backend_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A URL for a store that does not exist yet, on each backend."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'tocsin.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url

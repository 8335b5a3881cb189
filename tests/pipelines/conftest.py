"""``backend_url``: every pipeline test runs on SQLite and on PostgreSQL (the dispatcher
tests' fixture)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dispatcher.conftest import backend_url
from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.stores import open_store

__all__ = ["backend_url", "store"]


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    """A 16-bucket store on each backend with the recording channel ``out`` (the commands
    topic's tests)."""
    opened = open_store(backend_url, buckets=16)
    opened.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    yield opened
    opened.close()

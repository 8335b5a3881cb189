"""``backend_url``: every pipeline test runs on SQLite and on PostgreSQL (the dispatcher
tests' fixture)."""

from __future__ import annotations

from tests.dispatcher.conftest import backend_url

__all__ = ["backend_url"]

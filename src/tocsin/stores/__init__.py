"""Stores: the system of record. ``open_store(url)`` picks the backend from the URL.

``sqlite:///path.db`` (relative; ``sqlite:////abs/path.db`` absolute: the embedded default),
``sqlite:///:memory:`` (a fake for tests, one
process only) and ``postgresql://...`` (many machines; needs ``tocsin[postgres]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tocsin.domain.defaults import BUCKETS

if TYPE_CHECKING:
    from tocsin.abc import Store

__all__ = ["open_store"]


def open_store(url: str, *, buckets: int = BUCKETS) -> Store:
    """Open (creating and migrating when needed) the store at ``url``."""
    if url.startswith("sqlite://"):
        from tocsin.stores.sqlite import SQLiteStore

        return SQLiteStore(url.removeprefix("sqlite:///"), buckets=buckets)
    if url.startswith(("postgresql://", "postgres://")):
        from tocsin.stores.postgres import PostgresStore

        return PostgresStore(url, buckets=buckets).open()
    from tocsin.errors import ValidationError

    raise ValidationError("store", f"unsupported store URL {url!r}: use sqlite:///path or postgresql://")

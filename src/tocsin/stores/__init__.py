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

        return _keys_checked(SQLiteStore(url.removeprefix("sqlite:///"), buckets=buckets))
    if url.startswith(("postgresql://", "postgres://")):
        from tocsin.stores.postgres import PostgresStore

        return _keys_checked(PostgresStore(url, buckets=buckets).open())
    from tocsin.errors import ValidationError

    raise ValidationError("store", f"unsupported store URL {url!r}: use sqlite:///path or postgresql://")


def _keys_checked(store: Store) -> Store:
    """``store``, after saying in one log line when it holds sealed channel secrets and this
    process has no encryption key (reading those channels then fails, naming the key)."""
    import logging

    from tocsin.stores.sql.channels import SqlChannels

    if isinstance(store, SqlChannels) and store.sealer.current is None:
        sealed = store.sealed_channels()
        if sealed:
            logging.getLogger("tocsin.store").warning(
                "the store holds %d channels with secrets sealed at rest and "
                "TOCSIN_ENCRYPTION_KEY is not set: those channels cannot be read", sealed)
    return store

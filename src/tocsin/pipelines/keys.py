"""Finding a schedule by its key: the commands topic cancels and reschedules by key, since a
producer need not read the reply topic to learn the id.

The store's roles have no lookup by key yet; this reads the ``(tenant, key)`` index through
the store's own read helper until a small store role module takes it over.
"""

from __future__ import annotations

from typing import Any

from tocsin.abc import Store
from tocsin.errors import NotFoundError

__all__ = ["schedule_id_for_key"]

_SQL = "SELECT id FROM schedules WHERE tenant = {p} AND key = {p}"


def schedule_id_for_key(store: Store, *, tenant: str, key: str) -> str:
    """The id of ``tenant``'s schedule holding ``key``, or :class:`NotFoundError`."""
    backend: Any = store
    if hasattr(backend, "_read"):  # PostgresStore
        rows = backend._read(_SQL.format(p="%s"), (tenant, key))
    else:  # SQLiteStore
        rows = backend._work(lambda conn: conn.execute(_SQL.format(p="?"),
                                                       (tenant, key)).fetchall(), write=False)
    if not rows:
        raise NotFoundError("schedule", f"key {key!r} of tenant {tenant!r}")
    return str(rows[0][0])

"""Sealed payloads in the store: sealing them again with a new key (``tocsin encryption
rotate``), and sealing those in clear once payload encryption is on (:mod:`tocsin.sealing`).
Rows are written and read through :func:`~tocsin.sealing.seal_payload` and
:func:`~tocsin.sealing.open_payload`; this is the pass over what is already stored."""

from __future__ import annotations

from tocsin.sealing import PAYLOAD_MAGIC, Sealer
from tocsin.stores.sql.base import SqlBase

__all__ = ["RESEAL_CHUNK", "SqlPayloads"]

RESEAL_CHUNK = 1_000
"""Rows read at once by a pass (by id): a pass over millions never holds them all."""
_TABLES = ("schedules", "recurring")
"""Every table that keeps a payload."""


class SqlPayloads(SqlBase):
    """The stored payloads' pass of a key rotation."""

    def reseal_payloads(self, sealer: Sealer, *, seal_clear: bool) -> int:
        """Seal every stored payload sealed with another of ``sealer``'s keys again with its
        current key, and, when ``seal_clear``, every payload in clear too; how many rows
        changed. A row changed meanwhile (a reschedule) is left as its writer left it, which
        the process's keys wrote. Finished schedules are covered as well: their payloads are
        read by ``GET`` and the archive."""
        changed = 0
        for table in _TABLES:
            last = ""
            while rows := self._rows(f"SELECT id, payload FROM {table} WHERE id > ? "
                                     f"ORDER BY id LIMIT {RESEAL_CHUNK}", (last,)):
                last = str(rows[-1][0])
                for ident, stored in rows:
                    data = bytes(stored)
                    if sealer.sealed_with_current(data):
                        continue
                    if data.startswith(PAYLOAD_MAGIC):
                        new = sealer.seal_bytes(sealer.open_bytes(data))
                    elif seal_clear:
                        new = sealer.seal_bytes(data)
                    else:
                        continue
                    changed += self._changed(f"UPDATE {table} SET payload = ? "
                                             "WHERE id = ? AND payload = ?", (new, ident, data))
        return changed

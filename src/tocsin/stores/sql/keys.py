"""API keys, found by the digest of their secret (:class:`~tocsin.abc.KeyStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.abc import KeyStore
from tocsin.domain import ApiKey, Role
from tocsin.errors import ConflictError, NotFoundError
from tocsin.stores.sql.base import SqlBase, tenant_is

__all__ = ["KEY_COLUMNS", "MAX_SESSIONS_PER_KEY", "SqlKeys"]

KEY_COLUMNS = "id, role, tenant, read_only, name, digest, created_ms, revoked_ms"
MAX_SESSIONS_PER_KEY = 32
"""Dashboard sessions one key may hold: signing in once more ends its oldest (a script that
signs in in a loop would otherwise grow the table without bound)."""


def key_from_row(row: Sequence[Any]) -> ApiKey:
    """A ``KEY_COLUMNS`` row as an :class:`ApiKey`."""
    return ApiKey(id=row[0], role=Role(row[1]), tenant=row[2], read_only=bool(row[3]),
                  name=row[4], digest=row[5], created_ms=int(row[6]),
                  revoked_ms=None if row[7] is None else int(row[7]))


class SqlKeys(SqlBase, KeyStore):
    """The :class:`~tocsin.abc.KeyStore` role over a backend's ``_work``."""

    def put_key(self, key: ApiKey) -> ApiKey:
        if not self._changed(
                f"INSERT INTO api_keys ({KEY_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
                "ON CONFLICT DO NOTHING",
                (key.id, key.role.value, key.tenant, int(key.read_only), key.name, key.digest,
                 key.created_ms, key.revoked_ms)):
            raise ConflictError(f"API key {key.id} (or its secret) exists already", ident=key.id)
        return key

    def key_by_digest(self, digest: str) -> ApiKey | None:
        rows = self._rows(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE digest = ?", (digest,))
        return key_from_row(rows[0]) if rows else None

    def list_keys(self, *, tenant: str | None = None) -> list[ApiKey]:
        rows = self._rows(f"SELECT {KEY_COLUMNS} FROM api_keys WHERE {tenant_is()} "
                          "ORDER BY created_ms, id", (tenant, tenant))
        return [key_from_row(r) for r in rows]

    def revoke_key(self, key_id: str, *, now_ms: int) -> ApiKey:
        rows = self._write("UPDATE api_keys SET revoked_ms = coalesce(revoked_ms, ?) "
                           f"WHERE id = ? RETURNING {KEY_COLUMNS}", (now_ms, key_id))
        if not rows:
            raise NotFoundError("API key", key_id)
        return key_from_row(rows[0])

    def open_session(self, digest: str, *, key_digest: str, now_ms: int,
                     expires_ms: int) -> None:
        def work(conn: Any) -> None:
            conn.execute(self._dialect.q("DELETE FROM ui_sessions WHERE expires_ms <= ?"),
                         (now_ms,))
            conn.execute(self._dialect.q(
                "INSERT INTO ui_sessions (digest, key_digest, created_ms, expires_ms) "
                "VALUES (?, ?, ?, ?)"), (digest, key_digest, now_ms, expires_ms))
            conn.execute(self._dialect.q(
                "DELETE FROM ui_sessions WHERE key_digest = ? AND digest NOT IN ("
                "SELECT digest FROM ui_sessions WHERE key_digest = ? "
                "ORDER BY created_ms DESC, digest DESC LIMIT ?)"),
                (key_digest, key_digest, MAX_SESSIONS_PER_KEY))
        self._work(work)

    def session_key(self, digest: str, *, now_ms: int) -> ApiKey | None:
        columns = ", ".join(f"k.{c.strip()}" for c in KEY_COLUMNS.split(","))
        rows = self._rows(f"SELECT {columns} FROM ui_sessions s JOIN api_keys k "
                          "ON k.digest = s.key_digest WHERE s.digest = ? AND s.expires_ms > ?",
                          (digest, now_ms))
        return key_from_row(rows[0]) if rows else None

    def end_session(self, digest: str) -> None:
        self._changed("DELETE FROM ui_sessions WHERE digest = ?", (digest,), idempotent=True)

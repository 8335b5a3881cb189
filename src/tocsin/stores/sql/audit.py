"""The audit log (:class:`~tocsin.abc.AuditStore`), written once for both backends."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tocsin.abc import AuditStore
from tocsin.domain.audit import AuditEntry
from tocsin.stores.sql.base import SqlBase

__all__ = ["AUDIT_COLUMNS", "SqlAudit", "audit_from_row"]

AUDIT_COLUMNS = ("id, at_ms, key_id, key_tenant, tenant, action, target, status, client, "
                 "detail")


def audit_from_row(row: Sequence[Any]) -> AuditEntry:
    """An ``AUDIT_COLUMNS`` row as an :class:`AuditEntry`."""
    return AuditEntry(id=row[0], at_ms=int(row[1]), key_id=row[2], key_tenant=row[3],
                      tenant=row[4], action=row[5], target=row[6], status=int(row[7]),
                      client=row[8], detail=row[9])


class SqlAudit(SqlBase, AuditStore):
    """The :class:`~tocsin.abc.AuditStore` role over a backend's ``_work``."""

    def record_audit(self, entry: AuditEntry) -> None:
        self._changed(f"INSERT INTO audit_log ({AUDIT_COLUMNS}) "
                      "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                      (entry.id, entry.at_ms, entry.key_id, entry.key_tenant, entry.tenant,
                       entry.action, entry.target, entry.status, entry.client, entry.detail),
                      idempotent=True)

    def list_audit(self, *, tenant: str | None = None, key_id: str | None = None,
                   action: str | None = None, since_ms: int | None = None,
                   until_ms: int | None = None, after_id: str | None = None,
                   limit: int = 100) -> list[AuditEntry]:
        where: list[str] = ["1 = 1"]
        args: list[Any] = []
        for column, value in (("tenant", tenant), ("key_id", key_id)):
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if action is not None:
            where.append("substr(action, 1, ?) = ?")
            args += [len(action), action]
        if since_ms is not None:
            where.append("at_ms >= ?")
            args.append(since_ms)
        if until_ms is not None:
            where.append("at_ms < ?")
            args.append(until_ms)
        if after_id is not None:
            where.append("id > ?")
            args.append(after_id)
        rows = self._rows(f"SELECT {AUDIT_COLUMNS} FROM audit_log WHERE {' AND '.join(where)} "
                          "ORDER BY id LIMIT ?", (*args, limit))
        return [audit_from_row(r) for r in rows]

    def delete_audit(self, ids: Sequence[str]) -> int:
        gone = 0
        for start in range(0, len(ids), 500):
            part = list(ids[start:start + 500])
            marks = ", ".join("?" * len(part))
            gone += self._changed(f"DELETE FROM audit_log WHERE id IN ({marks})", part,
                                  idempotent=True)
        return gone

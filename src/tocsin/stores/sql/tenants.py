"""Tenant settings (:class:`~tocsin.abc.TenantStore`)."""

from __future__ import annotations

from typing import Any

from tocsin.abc import TenantStore
from tocsin.domain import Tenant
from tocsin.domain.tenant import Durability
from tocsin.stores.sql.base import Dialect, SqlBase
from tocsin.stores.sql.channels import bump_channels_version

__all__ = ["SqlTenants", "all_relaxed"]


class SqlTenants(SqlBase, TenantStore):
    """The :class:`~tocsin.abc.TenantStore` role over a backend's ``_work``."""

    def put_tenant(self, tenant: Tenant, *, now_ms: int) -> Tenant:
        sql = self._dialect.q(
            "INSERT INTO tenants (name, durability, updated_ms, weight, events) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT (name) DO UPDATE "
            "SET durability = excluded.durability, updated_ms = excluded.updated_ms, "
            "weight = excluded.weight, events = excluded.events")

        def work(conn: Any) -> None:
            conn.execute(sql, (tenant.name, tenant.durability.value, now_ms, tenant.weight,
                               tenant.events))
            bump_channels_version(conn)  # a channel's spec is read with its tenant's events

        self._work(work)
        return tenant._replace(configured=True)

    def get_tenant(self, name: str) -> Tenant:
        rows = self._rows("SELECT name, durability, weight, events FROM tenants WHERE name = ?",
                          (name,))
        if not rows:
            return Tenant(name, configured=False)
        return Tenant(rows[0][0], Durability(rows[0][1]), weight=int(rows[0][2]),
                      events=rows[0][3])

    def list_tenants(self) -> list[Tenant]:
        return [Tenant(n, Durability(v), weight=int(w), events=e) for n, v, w, e in self._rows(
            "SELECT name, durability, weight, events FROM tenants ORDER BY name")]


def all_relaxed(conn: Any, d: Dialect, tenants: frozenset[str]) -> bool:
    """True when every tenant in ``tenants`` is configured ``relaxed`` (a write that touches
    any strict tenant is committed strictly)."""
    if not tenants:
        return False
    marks = ", ".join("?" * len(tenants))
    row = conn.execute(d.q(f"SELECT count(*) FROM tenants WHERE durability = 'relaxed' "
                           f"AND name IN ({marks})"), tuple(tenants)).fetchone()
    return int(row[0]) == len(tenants)

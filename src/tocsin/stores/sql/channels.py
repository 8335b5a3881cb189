"""Registered channels, namespaced by tenant (:class:`~tocsin.abc.ChannelStore`)."""

from __future__ import annotations

import json

from tocsin.abc import ChannelStore
from tocsin.domain import ChannelSpec
from tocsin.errors import NotFoundError
from tocsin.stores.rows import CHANNEL_COLUMNS, channel_from_row
from tocsin.stores.sql.base import SqlBase, tenant_is

__all__ = ["SqlChannels"]


class SqlChannels(SqlBase, ChannelStore):
    """The :class:`~tocsin.abc.ChannelStore` role over a backend's ``_work``."""

    def put_channel(self, spec: ChannelSpec) -> ChannelSpec:
        self._changed(f"INSERT INTO channels ({CHANNEL_COLUMNS}) VALUES (?, ?, ?, ?) "
                      "ON CONFLICT (tenant, name) DO UPDATE "
                      "SET kind = excluded.kind, config = excluded.config",
                      (spec.name, spec.kind.value, json.dumps(spec.config), spec.tenant),
                      idempotent=True)
        return spec

    def get_channel(self, name: str, *, tenant: str) -> ChannelSpec:
        rows = self._rows(f"SELECT {CHANNEL_COLUMNS} FROM channels "
                          "WHERE tenant = ? AND name = ?", (tenant, name))
        if not rows:
            raise NotFoundError("channel", name)
        return channel_from_row(rows[0])

    def list_channels(self, *, tenant: str | None = None) -> list[ChannelSpec]:
        rows = self._rows(f"SELECT {CHANNEL_COLUMNS} FROM channels WHERE {tenant_is()} "
                          "ORDER BY tenant, name", (tenant, tenant))
        return [channel_from_row(r) for r in rows]

    def delete_channel(self, name: str, *, tenant: str) -> None:
        if not self._changed("DELETE FROM channels WHERE tenant = ? AND name = ?",
                             (tenant, name)):
            raise NotFoundError("channel", name)

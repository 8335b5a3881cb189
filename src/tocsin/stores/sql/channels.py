"""Registered channels, namespaced by tenant (:class:`~tocsin.abc.ChannelStore`)."""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

from tocsin.abc import ChannelStore
from tocsin.domain import ChannelSpec
from tocsin.errors import NotFoundError
from tocsin.sealing import Sealer, open_config, seal_config
from tocsin.stores.rows import CHANNEL_COLUMNS, channel_from_row
from tocsin.stores.sql.base import SqlBase, tenant_is

__all__ = ["SqlChannels"]


class SqlChannels(SqlBase, ChannelStore):
    """The :class:`~tocsin.abc.ChannelStore` role over a backend's ``_work``. A channel's
    secrets are sealed when it is written and opened when it is read, with the process's
    encryption keys (:mod:`tocsin.sealing`)."""

    _sealer: Sealer | None = None

    @property
    def sealer(self) -> Sealer:
        """The keys this store seals and opens channel secrets with (the settings', until
        :meth:`use_sealer` sets others)."""
        if self._sealer is None:
            self._sealer = Sealer.from_settings()
        return self._sealer

    def use_sealer(self, sealer: Sealer) -> None:
        """Seal and open with ``sealer`` from now on (a key rotation)."""
        self._sealer = sealer

    def _opened(self, row: Any) -> ChannelSpec:
        spec = channel_from_row(row)
        if "v1:" not in row[2]:
            return spec
        return replace(spec, config=open_config(spec.config, self.sealer))

    def put_channel(self, spec: ChannelSpec) -> ChannelSpec:
        config = seal_config(spec.config, self.sealer)
        self._changed(f"INSERT INTO channels ({CHANNEL_COLUMNS}) VALUES (?, ?, ?, ?) "
                      "ON CONFLICT (tenant, name) DO UPDATE "
                      "SET kind = excluded.kind, config = excluded.config",
                      (spec.name, spec.kind.value, json.dumps(config), spec.tenant),
                      idempotent=True)
        return spec

    def sealed_channels(self) -> int:
        """How many stored channels hold a sealed secret."""
        return len(self._rows("SELECT name FROM channels WHERE config LIKE ?", ('%"v1:%',)))

    def get_channel(self, name: str, *, tenant: str) -> ChannelSpec:
        rows = self._rows(f"SELECT {CHANNEL_COLUMNS} FROM channels "
                          "WHERE tenant = ? AND name = ?", (tenant, name))
        if not rows:
            raise NotFoundError("channel", name)
        return self._opened(rows[0])

    def list_channels(self, *, tenant: str | None = None) -> list[ChannelSpec]:
        rows = self._rows(f"SELECT {CHANNEL_COLUMNS} FROM channels WHERE {tenant_is()} "
                          "ORDER BY tenant, name", (tenant, tenant))
        return [self._opened(r) for r in rows]

    def delete_channel(self, name: str, *, tenant: str) -> None:
        if not self._changed("DELETE FROM channels WHERE tenant = ? AND name = ?",
                             (tenant, name)):
            raise NotFoundError("channel", name)

"""Registered channels, namespaced by tenant (:class:`~tocsin.abc.ChannelStore`)."""

from __future__ import annotations

import json
from collections.abc import Collection
from dataclasses import replace
from typing import Any

from tocsin.abc import ChannelStore
from tocsin.domain import ChannelSpec
from tocsin.errors import NotFoundError
from tocsin.sealing import Sealer, open_config, seal_config
from tocsin.stores.rows import CHANNEL_COLUMNS, channel_from_row
from tocsin.stores.sql.base import SqlBase, tenant_is

__all__ = ["SqlChannels", "bump_channels_version"]


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
        sql = self._dialect.q(f"INSERT INTO channels ({CHANNEL_COLUMNS}) VALUES (?, ?, ?, ?) "
                              "ON CONFLICT (tenant, name) DO UPDATE "
                              "SET kind = excluded.kind, config = excluded.config")

        def work(conn: Any) -> None:
            conn.execute(sql, (spec.name, spec.kind.value, json.dumps(config), spec.tenant))
            bump_channels_version(conn)

        self._work(work, idempotent=True)
        return spec

    def channels_version(self) -> int:
        rows = self._rows("SELECT v FROM meta WHERE k = 'channels_version'")
        return int(rows[0][0]) if rows else 0

    def sealed_channels(self) -> int:
        """How many stored channels hold a sealed secret."""
        return len(self._rows("SELECT name FROM channels WHERE config LIKE ?", ('%"v1:%',)))

    def get_channel(self, name: str, *, tenant: str) -> ChannelSpec:
        rows = self._rows(f"SELECT {CHANNEL_COLUMNS} FROM channels "
                          "WHERE tenant = ? AND name = ?", (tenant, name))
        if not rows:
            raise NotFoundError("channel", name)
        return self._opened(rows[0])

    def list_channels(self, *, tenant: str | None = None,
                      kinds: Collection[str] | None = None) -> list[ChannelSpec]:
        if kinds is not None and not kinds:
            return []
        among = "" if kinds is None else f" AND kind IN ({', '.join('?' * len(kinds))})"
        rows = self._rows(f"SELECT {CHANNEL_COLUMNS} FROM channels WHERE {tenant_is()}{among} "
                          "ORDER BY tenant, name", (tenant, tenant, *(kinds or ())))
        return [self._opened(r) for r in rows]

    def channel_kinds(self) -> set[str]:
        return {str(r[0]) for r in self._rows("SELECT DISTINCT kind FROM channels")}

    def delete_channel(self, name: str, *, tenant: str) -> None:
        sql = self._dialect.q("DELETE FROM channels WHERE tenant = ? AND name = ?")

        def work(conn: Any) -> int:
            deleted = int(conn.execute(sql, (tenant, name)).rowcount)
            if deleted:
                bump_channels_version(conn)
            return deleted

        if not self._work(work):
            raise NotFoundError("channel", name)


def bump_channels_version(conn: Any) -> None:
    """Change :meth:`~tocsin.abc.ChannelStore.channels_version`, in the caller's transaction."""
    conn.execute("INSERT INTO meta (k, v) VALUES ('channels_version', '1') ON CONFLICT (k) "
                 "DO UPDATE SET v = CAST(CAST(meta.v AS BIGINT) + 1 AS TEXT)")

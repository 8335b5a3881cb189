"""Heartbeats and figures for metrics (:class:`~tocsin.abc.HealthStore`), written once."""

from __future__ import annotations

import json
from typing import Any

from tocsin.abc import HealthStore
from tocsin.domain import Status
from tocsin.stores.rows import COUNTS_SQL, status_counts
from tocsin.stores.sql.base import SqlBase

__all__ = ["SqlHealth"]


class SqlHealth(SqlBase, HealthStore):
    """The :class:`~tocsin.abc.HealthStore` role over a backend's ``_work``."""

    def beat(self, component: str, *, now_ms: int, info: dict[str, Any] | None = None) -> None:
        self._changed("INSERT INTO beats VALUES (?, ?, ?) ON CONFLICT (component) DO UPDATE "
                      "SET at_ms = excluded.at_ms, info = excluded.info",
                      (component, now_ms, json.dumps(info or {})), idempotent=True)

    def last_beat(self, component: str) -> tuple[int, dict[str, Any]] | None:
        rows = self._rows("SELECT at_ms, info FROM beats WHERE component = ?", (component,))
        return None if not rows else (int(rows[0][0]), json.loads(rows[0][1]))

    def counts(self) -> dict[Status, int]:
        return status_counts(self._rows(COUNTS_SQL))

    def due_backlog(self, *, now_ms: int) -> int:
        rows = self._rows(
            "SELECT count(*) FROM schedules WHERE status = 'PENDING' AND next_ms <= ?",
            (now_ms,))
        return int(rows[0][0])

    def ping(self) -> None:
        self._rows("SELECT 1")

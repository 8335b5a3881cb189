"""The SQL stores' shared pieces under their former names: see :mod:`tocsin.stores.sql`."""

from __future__ import annotations

from tocsin.stores.sql import SqlStore
from tocsin.stores.sql.base import POSTGRES, SQLITE, Dialect, executemany
from tocsin.stores.sql.policies import (
    POLICY_COLUMNS,
    claim_throttled,
    policy_from_row,
    return_tokens,
    throttled_next_ms,
)
from tocsin.stores.sql.recurring import RECURRING_COLUMNS, recurring_from_row
from tocsin.stores.sql.tenants import all_relaxed

__all__ = [
    "POLICY_COLUMNS",
    "POSTGRES",
    "RECURRING_COLUMNS",
    "SQLITE",
    "Dialect",
    "SqlStore",
    "all_relaxed",
    "claim_throttled",
    "executemany",
    "policy_from_row",
    "recurring_from_row",
    "return_tokens",
    "throttled_next_ms",
]

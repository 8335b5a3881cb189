"""The SQL stores' statements, written once over a :class:`~tocsin.stores.sql.base.Dialect`.

One mixin per role (:mod:`.schedules`, :mod:`.dispatch`, :mod:`.channels`, :mod:`.recurring`,
:mod:`.policies`, :mod:`.tenants`, :mod:`.keys`, :mod:`.operations`, :mod:`.metrics`,
:mod:`.bulk_changes`, :mod:`.stats`, :mod:`.health`, :mod:`.audit`) over :class:`.base.SqlBase`;
:class:`SqlStore` is all of them. A backend (``tocsin.stores.sqlite``, ``tocsin.stores.postgres``)
subclasses it and supplies only what differs: connections and transactions (``_work``),
locking, bulk inserts, and the few statements with no common form.
"""

from __future__ import annotations

from tocsin.abc import Store
from tocsin.stores.sql.audit import SqlAudit
from tocsin.stores.sql.base import POSTGRES, SQLITE, Dialect, SqlBase
from tocsin.stores.sql.bulk_changes import SqlBulkChanges
from tocsin.stores.sql.channels import SqlChannels
from tocsin.stores.sql.dispatch import SqlDispatch
from tocsin.stores.sql.health import SqlHealth
from tocsin.stores.sql.keys import SqlKeys
from tocsin.stores.sql.metrics import SqlMetrics
from tocsin.stores.sql.operations import SqlOperations
from tocsin.stores.sql.payloads import SqlPayloads
from tocsin.stores.sql.policies import SqlPolicies
from tocsin.stores.sql.recurring import SqlRecurring
from tocsin.stores.sql.schedules import SqlSchedules
from tocsin.stores.sql.stats import SqlStats
from tocsin.stores.sql.tenants import SqlTenants

__all__ = ["POSTGRES", "SQLITE", "Dialect", "SqlBase", "SqlStore"]


class SqlStore(SqlSchedules, SqlDispatch, SqlChannels, SqlRecurring, SqlPolicies, SqlTenants,
               SqlKeys, SqlOperations, SqlMetrics, SqlBulkChanges, SqlStats, SqlHealth, SqlAudit,
               SqlPayloads, Store):
    """Every role of a SQL :class:`~tocsin.abc.Store`, over the backend's ``_work``."""

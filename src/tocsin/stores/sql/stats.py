"""Live figures per channel (:class:`~tocsin.abc.StatsStore`), written once: every query reads
a partial index or a bounded range of one (``schedules_finished``, ``deliveries_ended``)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from tocsin.abc import ChannelStats, StatsStore
from tocsin.stores.rows import FINISHED
from tocsin.stores.sql.base import Dialect, SqlBase, tenant_is
from tocsin.stores.sql.labels import carrying, rarest_first, selected

__all__ = ["FINISHED", "FINISHED_AT", "LATENESS_SAMPLE", "SqlStats", "finished_rows",
           "percentiles"]

FINISHED_AT = "coalesce(delivered_ms, next_ms)"
"""When a finished schedule finished (the expression of the ``schedules_finished`` index)."""


def finished_rows(dialect: Dialect) -> str:
    """``schedules … WHERE`` the finished ones, read by the ``schedules_finished`` index: the
    caller follows it with ``AND`` a range of :data:`FINISHED_AT`."""
    return f"schedules{dialect.by_finish} WHERE {FINISHED}"

LATENESS_SAMPLE = 20_000
"""Lateness figures come from at most this many of the window's most recent deliveries."""

_WAITING = (f"SELECT tenant, channel, count(*), sum(CASE WHEN next_ms < ? THEN 1 ELSE 0 END) "
            f"FROM {{source}} WHERE status = 'PENDING' AND {tenant_is()} "
            "GROUP BY tenant, channel")
_FINISHED = (f"SELECT tenant, channel, status, count(*) FROM {{rows}} AND {FINISHED_AT} >= ? "
             f"AND {tenant_is()} GROUP BY tenant, channel, status")
_ATTEMPTS = (f"SELECT s.tenant, s.channel, d.outcome, d.lateness_ms FROM "
             f"(SELECT schedule_id, outcome, lateness_ms FROM deliveries WHERE ended_ms >= ? "
             f"{{carrying}}ORDER BY ended_ms DESC LIMIT ?) d "
             f"JOIN schedules s ON s.id = d.schedule_id WHERE {tenant_is('s.tenant')}")


def percentiles(values: list[int]) -> tuple[int, int, int, int] | None:
    """p50, p95, p99 and max of ``values`` (nearest rank), None when empty."""
    if not values:
        return None
    ordered = sorted(values)

    def rank(p: float) -> int:
        return ordered[max(0, min(len(ordered) - 1, -(-int(p * len(ordered)) // 100) - 1))]

    return rank(50), rank(95), rank(99), ordered[-1]


class SqlStats(SqlBase, StatsStore):
    """The :class:`~tocsin.abc.StatsStore` role over a backend's ``_work``."""

    def stats(self, *, now_ms: int, window_ms: int, ahead_ms: int,
              tenant: str | None = None,
              labels: Sequence[tuple[str, str]] = ()) -> list[ChannelStats]:
        # With a selector: what waits and what finished, of the schedules the label index
        # gives (every one carrying the rarest pair, each looked up by id); the window's
        # attempts, newest first, each probed in the index until the sample is full.
        labels = rarest_first(self, labels, tenant=tenant)
        source, source_args = selected(labels, tenant=tenant)
        rows = (finished_rows(self._dialect) if not labels
                else f"{source} WHERE {FINISHED}")
        probes, probe_args = carrying(labels, tenant=tenant, column="deliveries.schedule_id")
        since = now_ms - window_ms
        figures: dict[tuple[str, str], dict[str, Any]] = defaultdict(
            lambda: {"pending": 0, "due_soon": 0, "DELIVERED": 0, "DEAD": 0, "EXPIRED": 0,
                     "CANCELLED": 0,
                     "retried": 0, "lateness": []})
        for t, channel, pending, soon in self._rows(
                _WAITING.format(source=source),
                (now_ms + ahead_ms, *source_args, tenant, tenant)):
            figures[(t, channel)].update(pending=int(pending), due_soon=int(soon or 0))
        for t, channel, status, count in self._rows(
                _FINISHED.format(rows=rows), (*source_args, since, tenant, tenant)):
            figures[(t, channel)][status] = int(count)
        for t, channel, outcome, lateness in self._rows(
                _ATTEMPTS.format(carrying="".join(f"AND {p} " for p in probes)),
                (since, *probe_args, LATENESS_SAMPLE, tenant, tenant)):
            row = figures[(t, channel)]
            if outcome == "delivered":
                row["lateness"].append(int(lateness))
            elif outcome == "retry":
                row["retried"] += 1
        return [ChannelStats(tenant=t, channel=c, pending=f["pending"], due_soon=f["due_soon"],
                             delivered=f["DELIVERED"], dead=f["DEAD"],
                             cancelled=f["CANCELLED"], retried=f["retried"],
                             lateness_ms=percentiles(f["lateness"]), expired=f["EXPIRED"])
                for (t, c), f in sorted(figures.items())]

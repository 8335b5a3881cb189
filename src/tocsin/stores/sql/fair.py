"""The claim's fair share: which destinations (a channel of a tenant) have work due, and how
many rows each may take of a claim. A destination alone takes the whole claim; beside others,
each tenant with work due gets rows in proportion to its weight, split evenly between its
destinations, and what one does not use goes to those that had more (see docs/semantics.md,
"Slow and failing destinations")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import cycle, islice
from typing import Any

from tocsin.stores.sql.base import Dialect
from tocsin.stores.sql.operations import NOT_PAUSED

__all__ = ["ALWAYS_MS", "DESTINATIONS", "ROUNDS", "Destination", "by_destination", "shares",
           "weights"]

Destination = tuple[str, str]
"""A channel of a tenant: ``(tenant, channel)``."""

ALWAYS_MS = 2**62
"""A time every schedule is due by (for :data:`DESTINATIONS` of every pending destination)."""
ROUNDS = 3
"""How many times a claim hands out what its destinations left unused."""
_PER_STATEMENT = 100
"""Most destinations one claiming statement names (SQLite takes at most 500 terms of a
compound select)."""

_UNTHROTTLED = "status = 'PENDING' AND policy IS NULL"
DESTINATIONS = (
    # A skip scan of schedules_dest: from each destination's first row to the next
    # destination's, one index seek each (the next channel of the tenant, else the next
    # tenant: SQLite reads a row value comparison as a range of its first column, every row of
    # the tenant), however many rows a destination has due. Row ids carry the walk because
    # SQLite's scalar subqueries return one column.
    "WITH RECURSIVE d(id) AS ("
    f"SELECT (SELECT id FROM schedules WHERE {_UNTHROTTLED} "
    "ORDER BY tenant, channel, next_ms LIMIT 1) "
    "UNION ALL "
    "SELECT coalesce((SELECT n.id FROM schedules n WHERE n.status = 'PENDING' "
    "AND n.policy IS NULL AND n.tenant = p.tenant AND n.channel > p.channel "
    "ORDER BY n.tenant, n.channel, n.next_ms LIMIT 1), "
    "(SELECT n.id FROM schedules n WHERE n.status = 'PENDING' AND n.policy IS NULL "
    "AND n.tenant > p.tenant ORDER BY n.tenant, n.channel, n.next_ms LIMIT 1)) "
    "FROM d JOIN schedules p ON p.id = d.id) "
    "SELECT s.tenant, s.channel, s.next_ms FROM d JOIN schedules s ON s.id = d.id "
    f"WHERE s.next_ms <= ? AND {NOT_PAUSED} ORDER BY s.next_ms, s.tenant, s.channel"
)
"""The destinations, neither paused nor held, whose earliest unthrottled PENDING schedule is
due by a time (one argument), with that schedule's time, earliest first. Its cost is one seek
per destination with schedules pending, due or not (about 10 us each on SQLite, 8 on
PostgreSQL)."""


def weights(conn: Any, d: Dialect, tenants: Sequence[str]) -> dict[str, int]:
    """The weights of ``tenants`` (1 for one with no row)."""
    found = {str(r[0]): max(1, int(r[1])) for r in conn.execute(
        d.q(f"SELECT name, weight FROM tenants WHERE name IN ({', '.join('?' * len(tenants))})"),
        tuple(tenants)).fetchall()} if len(tenants) > 1 else {}
    return {t: found.get(t, 1) for t in tenants}


def shares(destinations: Sequence[Destination], weight: Mapping[str, int],
           room: int) -> dict[Destination, int]:
    """``room`` rows split between ``destinations`` (earliest due first): each tenant's part
    in proportion to its weight, split evenly between its destinations; the rows the
    rounding leaves go one each in order (so with more destinations than rows, the earliest
    get one). Only positive shares are named; they add up to ``room``."""
    if not destinations or room <= 0:
        return {}
    per_tenant: dict[str, list[Destination]] = {}
    for dest in destinations:
        per_tenant.setdefault(dest[0], []).append(dest)
    total = sum(weight.get(t, 1) for t in per_tenant)
    share = {dest: 0 for dest in destinations}
    for tenant, dests in per_tenant.items():
        part = room * weight.get(tenant, 1) // total
        for dest in dests:
            share[dest] = part // len(dests)
    for dest in islice(cycle(destinations), room - sum(share.values())):
        share[dest] += 1
    return {dest: n for dest, n in share.items() if n > 0}


def by_destination(share: Mapping[Destination, int], candidate: str, args: Sequence[Any], *,
                   column: str = "id") -> list[tuple[str, list[Any]]]:
    """Statements, each selecting ``column`` of up to ``_PER_STATEMENT`` destinations'
    shares: ``candidate`` is a select of one destination's candidates (aliased ``s``) ending
    in its limit, with the placeholders ``args`` and then tenant, channel and limit."""
    items = list(share.items())
    out = []
    for i in range(0, len(items), _PER_STATEMENT):
        part = items[i:i + _PER_STATEMENT]
        sql = " UNION ALL ".join(f"SELECT {column} FROM ({candidate}) AS c{j}"
                                 for j in range(len(part)))
        out.append((sql, [a for (tenant, channel), n in part for a in (*args, tenant, channel, n)]))
    return out

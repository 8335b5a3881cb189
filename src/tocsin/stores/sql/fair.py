"""The claim's fair share: which destinations (a channel of a tenant) have work due, and how
many rows each may take of a claim. A destination alone takes the whole claim; beside others,
each tenant with work due gets rows in proportion to its weight, split evenly between its
destinations, and what one does not use goes to those that had more (see docs/semantics.md,
"Slow and failing destinations")."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import count, cycle, islice
from typing import Any, NamedTuple

from tocsin.stores.sql.base import Dialect, sent
from tocsin.stores.sql.operations import NOT_HELD_HERE

__all__ = ["LAG_MS", "NEAR_MS", "NEVER_MS", "PEEK_PAGE", "ROUNDS", "Destination", "Due",
           "WakePages", "by_destination", "due_destinations", "listing", "raise_wakes",
           "send_due_destinations", "send_earliest_wake", "send_raise_wakes", "shares",
           "weights"]

Destination = tuple[str, str]
"""A channel of a tenant: ``(tenant, channel)``."""

NEVER_MS = 2**62
"""The wake-up time of a destination with nothing pending."""
ROUNDS = 3
"""How many times a claim hands out what its destinations left unused."""
LAG_MS = 250
"""A claim raises a destination's wake-up time once its earliest schedule is this much later
(or not due, or gone): the seek from the wake-up time passes over the index entries of the
rows claimed since, which a long transaction elsewhere keeps (a quarter of a second of a
destination's rows), and each raise is one row version of ``destinations``."""
NEAR_MS = 10
"""A claim leaves a destination's wake-up time as it is while its earliest schedule falls due
within this much after the claim's time (and :data:`LAG_MS` after the wake-up time): at 200 a
second on one destination every claim raised it, on PostgreSQL each raise a locked row and new
versions of it and of its index entries (the raise's look-up read 56 pages a call)."""
PEEK_PAGE = 8
"""How many destinations a look for the earliest claimable time reads at a time
(:class:`WakePages`)."""
_PER_STATEMENT = 100
"""Most destinations one claiming statement names (SQLite takes at most 500 terms of a
compound select)."""


class Due(NamedTuple):
    """A destination whose wake-up time has come, and its earliest unthrottled PENDING
    schedule's time (None: nothing pending; later than the claim's time: nothing due)."""

    tenant: str
    channel: str
    wake_ms: int
    first_ms: int | None

    @property
    def destination(self) -> Destination:
        """``(tenant, channel)``."""
        return (self.tenant, self.channel)


_PENDING = "f.status = 'PENDING' AND f.policy IS NULL"
_FIRST = (f"(SELECT f.next_ms FROM schedules f WHERE {_PENDING} AND f.tenant = s.tenant "
          "AND f.channel = s.channel AND f.next_ms >= s.wake_ms "
          "ORDER BY f.tenant, f.channel, f.next_ms LIMIT 1)")
"""The earliest unthrottled PENDING schedule's time of a destination ``s`` of
``destinations``: one seek of ``schedules_dest`` from the wake-up time (no schedule of it is
earlier), past the entries of rows claimed before it."""
_RANGE = ("SELECT s.tenant, s.channel, s.wake_ms FROM destinations s WHERE s.wake_ms <= ?{after} "
          "ORDER BY s.wake_ms, s.tenant, s.channel")
_WALK = (
    # One index seek per destination, whatever the planner thinks of the table: without
    # statistics, or with a histogram from before the idle destinations came, PostgreSQL
    # would read all of them and sort.
    "WITH RECURSIVE w(tenant, channel, wake_ms) AS ("
    "(SELECT x.tenant, x.channel, x.wake_ms FROM destinations x WHERE x.wake_ms <= ?{after} "
    "ORDER BY x.wake_ms, x.tenant, x.channel LIMIT 1) "
    "UNION ALL "
    "(SELECT n.tenant, n.channel, n.wake_ms FROM w CROSS JOIN LATERAL ("
    "SELECT x.tenant, x.channel, x.wake_ms FROM destinations x "
    "WHERE (x.wake_ms, x.tenant, x.channel) > (w.wake_ms, w.tenant, w.channel) "
    "AND x.wake_ms <= ? ORDER BY x.wake_ms, x.tenant, x.channel LIMIT 1) n)) "
    "SELECT s.tenant, s.channel, s.wake_ms FROM w s"
)


def listing(d: Dialect, until_ms: int, run: str = "", *, after: Due | None = None,
            limit: int | None = None) -> tuple[str, tuple[int | str, ...]]:
    """The statement of :func:`due_destinations`, in dialect ``d``, and its arguments."""
    t = "x" if d.walk else "s"  # the table's alias in the walk, or in the range
    past = "" if after is None else f" AND ({t}.wake_ms, {t}.tenant, {t}.channel) > (?, ?, ?)"
    start = () if after is None else (after.wake_ms, after.tenant, after.channel)
    walk = (_WALK if d.walk else _RANGE).format(after=past)
    args = (until_ms, *start, until_ms) if d.walk else (until_ms, *start)
    return (d.q(f"SELECT s.tenant, s.channel, s.wake_ms, {_FIRST} FROM ({walk}) s "
                f"WHERE {NOT_HELD_HERE}" + ("" if limit is None else " LIMIT ?")),
            (*args, run, *(() if limit is None else (limit,))))


def due_destinations(conn: Any, d: Dialect, until_ms: int, run: str = "", *,
                     after: Due | None = None, limit: int | None = None) -> list[Due]:
    """The destinations, neither paused nor held (as dispatcher run ``run`` sees them:
    :data:`~tocsin.stores.sql.operations.NOT_HELD_HERE`), whose wake-up time is ``until_ms`` or
    earlier, each with its earliest schedule's time, earliest first. Its cost is two seeks
    per such destination; a destination whose schedules are all later costs nothing (a
    destination keeps its wake-up time until a claim raises it, :func:`raise_wakes`).
    With ``limit``, only the first ``limit`` of them by wake-up time (then tenant and
    channel), after ``after`` in that order: a page of :class:`WakePages`."""
    return send_due_destinations(conn, d, until_ms, run, after=after, limit=limit)()


def send_due_destinations(conn: Any, d: Dialect, until_ms: int, run: str = "", *,
                          after: Due | None = None,
                          limit: int | None = None) -> Callable[[], list[Due]]:
    """:func:`due_destinations`, sent now and read when called
    (:func:`~tocsin.stores.sql.base.sent`)."""
    rows = sent(conn, d, *listing(d, until_ms, run, after=after, limit=limit))

    def read() -> list[Due]:
        found = [Due(str(r[0]), str(r[1]), int(r[2]), None if r[3] is None else int(r[3]))
                 for r in rows()]
        found.sort(key=lambda x: (NEVER_MS if x.first_ms is None else x.first_ms, x.tenant,
                                  x.channel))
        return found

    return read


class WakePages:
    """:func:`due_destinations` by pages of ``page`` destinations, in wake-up order, for one
    look at the earliest claimable time: a destination's schedules are no earlier than its
    wake-up time, so the look stops once a page's last wake-up time is past what it found (with
    10 000 destinations due within a hand-over window, listing them all for each look was a
    fifth of a dispatcher's CPU). The first page is sent at once (read with the next statement
    read); each page is read once and kept for every bucket range of the look."""

    def __init__(self, conn: Any, d: Dialect, until_ms: int, run: str = "",
                 page: int = PEEK_PAGE) -> None:
        self._conn, self._d, self._until_ms, self._run, self._page = conn, d, until_ms, run, page
        self._next: Callable[[], list[Due]] | None = send_due_destinations(
            conn, d, until_ms, run, limit=page)
        self._pages: list[list[Due]] = []

    def __iter__(self) -> Iterator[list[Due]]:
        for i in count():
            if i == len(self._pages) and not self._read():
                return
            yield self._pages[i]

    def _read(self) -> bool:
        """Read the next page; False when there is none."""
        if self._next is None:
            return False
        found, self._next = self._next(), None
        if len(found) == self._page:
            after = max(found, key=lambda x: (x.wake_ms, x.tenant, x.channel))
            self._next = lambda: due_destinations(self._conn, self._d, self._until_ms,
                                                  self._run, after=after, limit=self._page)
        if found:
            self._pages.append(found)
        return bool(found)


def send_earliest_wake(conn: Any, d: Dialect, after_ms: int,
                       run: str = "") -> Callable[[], int | None]:
    """The earliest wake-up time after ``after_ms`` of a destination neither paused nor held
    (as run ``run`` sees them; no later than its earliest schedule), None when there is none:
    sent now and read when called (:func:`~tocsin.stores.sql.base.sent`)."""
    rows = sent(conn, d, d.q(
        "SELECT s.wake_ms FROM destinations s WHERE s.wake_ms > ? AND s.wake_ms < ? "
        f"AND {NOT_HELD_HERE} ORDER BY s.wake_ms LIMIT 1"), (after_ms, NEVER_MS, run))
    return lambda: None if not (found := rows()) else int(found[0][0])


def raise_wakes(conn: Any, d: Dialect, dues: Sequence[Due], until_ms: int) -> None:
    """Raise the wake-up time of each of ``dues`` (after a claim took from them) whose earliest
    schedule is not due within :data:`NEAR_MS` of ``until_ms``, is gone, or lies
    :data:`LAG_MS` past it, to its earliest schedule's time (:data:`NEVER_MS`: none).
    PostgreSQL: the rows are locked first, skipping those that a writer holds (it is writing
    a schedule of that destination: the bound stays, a later claim raises it), and the times
    are read after, by a statement that sees every schedule committed before the lock (not
    one statement: its snapshot would be taken before its lock, and miss a schedule whose
    writer committed in between)."""
    send_raise_wakes(conn, d, dues, until_ms)()


def send_raise_wakes(conn: Any, d: Dialect, dues: Sequence[Due],
                     until_ms: int) -> Callable[[], None]:
    """:func:`raise_wakes`, its locking reads sent now (in a pipeline they go out with the
    next statement read, :func:`~tocsin.stores.sql.base.sent`) and the raise done when the
    function returned is called: a claim sends them behind its own statements, one round
    trip for both."""
    stale = [sent(conn, d, d.q(
        f"SELECT s.tenant, s.channel FROM {_named(len(part))} JOIN destinations s "
        f"ON {_NAMED} WHERE NOT EXISTS (SELECT 1 FROM schedules f WHERE {_PENDING} "
        "AND f.tenant = s.tenant AND f.channel = s.channel AND f.next_ms >= s.wake_ms "
        f"AND f.next_ms <= ? AND f.next_ms < s.wake_ms + ?){d.skip_locked}"),
        (*(a for x in part for a in x.destination), until_ms + NEAR_MS, LAG_MS))
        for part in (dues[i:i + _PER_STATEMENT] for i in range(0, len(dues), _PER_STATEMENT))]

    def raise_them() -> None:
        for found in stale:
            if rows := found():
                conn.execute(d.q(
                    f"UPDATE destinations AS s SET wake_ms = coalesce({_FIRST}, ?) "
                    f"FROM {_named(len(rows))} WHERE {_NAMED}"),
                    (NEVER_MS, *(a for r in rows for a in r)))

    return raise_them


_NAMED = "s.tenant = v.column1 AND s.channel = v.column2"
"""A row ``s`` of ``destinations`` is the destination ``v`` of a :func:`_named` list."""


def _named(n: int) -> str:
    """A list of ``n`` destinations, each two placeholders (tenant, channel), as ``v`` to join
    ``destinations`` on by its key (:data:`_NAMED`). Not ``(tenant, channel) IN (VALUES …)``:
    SQLite answers that by reading every destination (a claim of four destinations beside
    10 000 idle ones spent 2-4 ms there, half its time, holding the writer)."""
    return "(VALUES " + ", ".join("(?, ?)" for _ in range(n)) + ") AS v"


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


def by_destination(share: Mapping[Destination, int], candidate: str, args: Sequence[Any],
                   floor: Mapping[Destination, int], *,
                   column: str = "id") -> list[tuple[str, list[Any]]]:
    """Statements, each selecting ``column`` of up to ``_PER_STATEMENT`` destinations'
    shares: ``candidate`` is a select of one destination's candidates (aliased ``s``) ending
    in its limit, with the placeholders ``args`` and then tenant, channel, the destination's
    wake-up time (``floor``: none of its schedules is earlier) and limit."""
    items = list(share.items())
    out = []
    for i in range(0, len(items), _PER_STATEMENT):
        part = items[i:i + _PER_STATEMENT]
        sql = " UNION ALL ".join(f"SELECT {column} FROM ({candidate}) AS c{j}"
                                 for j in range(len(part)))
        out.append((sql, [a for dest, n in part
                          for a in (*args, *dest, floor.get(dest, 0), n)]))
    return out

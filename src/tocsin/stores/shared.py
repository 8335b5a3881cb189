"""Recurring schedules and throttling policies, written once for both SQL stores.

The statements are plain SQL that SQLite and PostgreSQL both read; a :class:`Dialect` supplies
what differs (the placeholder, the ordering-key predicate, row locks). A store mixes in
:class:`RecurringAndPolicies` and provides ``_work(fn, write=...)``: run ``fn(conn)`` in one
write transaction (or on a plain connection to read). The throttled claim and the token
bookkeeping are module functions, called inside each store's own claim and acknowledgement
transactions.
"""

from __future__ import annotations

import builtins
import json
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from tocsin.abc import FiringRecord, Store
from tocsin.domain import (
    CronTrigger,
    Expansion,
    MisfirePolicy,
    NewSchedule,
    PayloadKind,
    Policy,
    RateBucket,
    Recurring,
    Status,
    Tenant,
)
from tocsin.domain.tenant import Durability
from tocsin.errors import ConflictError, NotFoundError
from tocsin.ids import bucket_of, delivery_id
from tocsin.stores.rows import (
    CLAIM_COLUMNS,
    INSERT_ARITY,
    INSERT_COLUMNS,
    head_of_key,
    insert_values,
)

__all__ = [
    "POSTGRES",
    "SQLITE",
    "Dialect",
    "RecurringAndPolicies",
    "all_relaxed",
    "claim_throttled",
    "return_tokens",
    "throttled_next_ms",
]

T = TypeVar("T")


class Dialect(NamedTuple):
    """What the two SQL dialects spell differently."""

    mark: str
    """The driver's placeholder."""
    head: str
    """The ordering-key predicate (:func:`~tocsin.stores.rows.head_of_key`)."""
    skip_locked: str
    """Appended to a sub-select of candidate schedules (aliased ``s``) to be claimed."""
    lock_policy: str
    """Appended to the select of the policies (aliased ``p``) a claim takes tokens from."""

    def q(self, sql: str) -> str:
        """``sql`` written with ``?`` placeholders, in this dialect."""
        return sql if self.mark == "?" else sql.replace("?", self.mark)


SQLITE = Dialect("?", head_of_key("rowid"), "", "")
"""SQLite: one writer at a time, so no row locks are needed."""
POSTGRES = Dialect("%s", head_of_key("seq"), " FOR UPDATE OF s SKIP LOCKED", " FOR UPDATE OF p")
"""PostgreSQL: a claim locks the policies it takes tokens from, so concurrent claims in other
bucket ranges or other dispatchers wait and then count the tokens just taken."""

RECURRING_COLUMNS = (
    "id, tenant, cron, timezone, start_ms, end_ms, channel, payload, payload_kind, headers, "
    "per_firing, stagger_ms, misfire, misfire_grace_ms, policy, paused, revision, "
    "expanded_until_ms, next_expand_ms, created_ms, updated_ms"
)
_RECURRING_SET = (
    "cron = ?, timezone = ?, start_ms = ?, end_ms = ?, channel = ?, payload = ?, "
    "payload_kind = ?, headers = ?, per_firing = ?, stagger_ms = ?, misfire = ?, "
    "misfire_grace_ms = ?, policy = ?, paused = ?"
)
POLICY_COLUMNS = "name, max_in_flight, rate, token_lease_ms, rate_tokens, rate_ms"
_INSERT_IGNORE = (f"INSERT INTO schedules ({INSERT_COLUMNS}) VALUES "
                  f"({', '.join('?' * INSERT_ARITY)}) ON CONFLICT DO NOTHING")
_CANCEL_FUTURE = ("UPDATE schedules SET status = 'CANCELLED', next_ms = ? WHERE recurring_id = ? "
                  "AND status = 'PENDING' AND firing_ms > ?")


def recurring_from_row(row: Sequence[Any]) -> Recurring:
    """A ``RECURRING_COLUMNS`` row as a :class:`Recurring`."""
    return Recurring(
        id=row[0], tenant=row[1],
        trigger=CronTrigger.parse(row[2], row[3], start_ms=row[4], end_ms=row[5]),
        channel=row[6], payload=bytes(row[7]), payload_kind=PayloadKind(row[8]),
        headers=json.loads(row[9]), count=row[10], stagger_ms=row[11],
        misfire=MisfirePolicy(row[12]), misfire_grace_ms=row[13], policy=row[14],
        paused=bool(row[15]), revision=row[16], expanded_until_ms=row[17],
        next_expand_ms=row[18], created_ms=row[19], updated_ms=row[20],
    )


def _rule_values(r: Recurring) -> tuple[Any, ...]:
    """The values of ``_RECURRING_SET``, in order."""
    t = r.trigger
    return (t.expr, t.timezone.key, t.start_ms, t.end_ms, r.channel, r.payload,
            r.payload_kind.value, json.dumps(r.headers, separators=(",", ":")), r.count,
            r.stagger_ms, r.misfire.value, r.misfire_grace_ms, r.policy, int(r.paused))


def policy_from_row(row: Sequence[Any]) -> tuple[Policy, RateBucket]:
    """A ``POLICY_COLUMNS`` row as a policy and its rate bucket."""
    policy = Policy(name=row[0], max_in_flight=row[1], rate=row[2], token_lease_ms=row[3])
    return policy, RateBucket(float(row[4]), int(row[5]))


def _executemany(conn: Any, sql: str, rows: Sequence[Sequence[Any]]) -> None:
    """``executemany`` on a sqlite3 or a psycopg connection."""
    if not rows:
        return
    if hasattr(conn, "executemany"):
        conn.executemany(sql, rows)
    else:
        with conn.cursor() as cur:
            cur.executemany(sql, rows)


class RecurringAndPolicies(Store):
    """The recurring and policy half of a SQL :class:`~tocsin.abc.Store`."""

    _dialect: Dialect

    def _work(self, fn: Callable[[Any], T], *, write: bool = True) -> T:
        """Run ``fn(conn)`` in one write transaction (``write``) or on a reading connection."""
        raise NotImplementedError

    def _rows(self, sql: str, args: Sequence[Any] = ()) -> builtins.list[tuple[Any, ...]]:
        d = self._dialect
        return self._work(lambda conn: list(conn.execute(d.q(sql), args).fetchall()),
                          write=False)

    # -- recurring -------------------------------------------------------------------------

    def create_recurring(self, recurring: Recurring, *, now_ms: int) -> Recurring:
        d, buckets = self._dialect, self.buckets

        def work(conn: Any) -> tuple[Any, ...]:
            _check_policy(conn, d, recurring.policy)
            return tuple(conn.execute(d.q(
                f"INSERT INTO recurring ({RECURRING_COLUMNS}, bucket) VALUES "
                f"(?, ?, {', '.join('?' * 14)}, 0, ?, ?, ?, ?, ?) RETURNING {RECURRING_COLUMNS}"),
                (recurring.id, recurring.tenant, *_rule_values(recurring), now_ms, now_ms,
                 now_ms, now_ms, bucket_of(recurring.id, buckets))).fetchone())

        return recurring_from_row(self._work(work))

    def get_recurring(self, recurring_id: str) -> Recurring:
        rows = self._rows(f"SELECT {RECURRING_COLUMNS} FROM recurring WHERE id = ?",
                          (recurring_id,))
        if not rows:
            raise NotFoundError("recurring schedule", recurring_id)
        return recurring_from_row(rows[0])

    def list_recurring(self, *, tenant: str | None = None, after_id: str | None = None,
                       limit: int = 100) -> builtins.list[Recurring]:
        rows = self._rows(
            f"SELECT {RECURRING_COLUMNS} FROM recurring "
            "WHERE (CAST(? AS TEXT) IS NULL OR tenant = ?) AND id > ? ORDER BY id LIMIT ?",
            (tenant, tenant, after_id or "", limit))
        return [recurring_from_row(r) for r in rows]

    def update_recurring(self, recurring: Recurring, *, now_ms: int) -> Recurring:
        d = self._dialect

        def work(conn: Any) -> tuple[Any, ...] | None:
            _check_policy(conn, d, recurring.policy)
            row = conn.execute(d.q(
                f"UPDATE recurring SET {_RECURRING_SET}, revision = revision + 1, "
                "expanded_until_ms = ?, next_expand_ms = ?, updated_ms = ? WHERE id = ? "
                f"RETURNING {RECURRING_COLUMNS}"),
                (*_rule_values(recurring), now_ms, now_ms, now_ms, recurring.id)).fetchone()
            if row is not None:  # firings still ahead are expanded anew under the new rule
                conn.execute(d.q(_CANCEL_FUTURE), (now_ms, recurring.id, now_ms))
            return None if row is None else tuple(row)

        row = self._work(work)
        if row is None:
            raise NotFoundError("recurring schedule", recurring.id)
        return recurring_from_row(row)

    def delete_recurring(self, recurring_id: str, *, now_ms: int) -> int:
        d = self._dialect

        def work(conn: Any) -> int | None:
            if not conn.execute(d.q("DELETE FROM recurring WHERE id = ?"),
                                (recurring_id,)).rowcount:
                return None
            conn.execute(d.q("DELETE FROM skipped_firings WHERE recurring_id = ?"),
                         (recurring_id,))
            return int(conn.execute(d.q(_CANCEL_FUTURE),
                                    (now_ms, recurring_id, now_ms)).rowcount)

        cancelled = self._work(work)
        if cancelled is None:
            raise NotFoundError("recurring schedule", recurring_id)
        return cancelled

    def recurring_due(self, *, bucket_lo: int, bucket_hi: int, now_ms: int,
                      limit: int) -> builtins.list[Recurring]:
        rows = self._rows(
            f"SELECT {RECURRING_COLUMNS} FROM recurring WHERE bucket BETWEEN ? AND ? "
            "AND next_expand_ms <= ? ORDER BY next_expand_ms LIMIT ?",
            (bucket_lo, bucket_hi, now_ms, limit))
        return [recurring_from_row(r) for r in rows]

    def next_expansion_ms(self) -> int | None:
        found = self._rows("SELECT min(next_expand_ms) FROM recurring")[0][0]
        return None if found is None else int(found)

    def record_expansions(self, expansions: Sequence[tuple[Recurring, Expansion,
                                                           Sequence[NewSchedule], int | None]],
                          *, now_ms: int) -> int:
        d, buckets = self._dialect, self.buckets

        def work(conn: Any) -> int:
            applied = 0
            for recurring, expansion, items, next_expand_ms in expansions:
                moved = conn.execute(d.q(
                    "UPDATE recurring SET expanded_until_ms = ?, next_expand_ms = ? "
                    "WHERE id = ? AND revision = ? AND expanded_until_ms = ?"),
                    (expansion.until_ms, next_expand_ms, recurring.id, recurring.revision,
                     recurring.expanded_until_ms)).rowcount
                if not moved:  # changed, deleted or expanded meanwhile: this one is stale
                    continue
                applied += 1
                _executemany(conn, d.q(_INSERT_IGNORE),
                             [insert_values(i, buckets=buckets, now_ms=now_ms) for i in items])
                _executemany(conn, d.q(
                    "INSERT INTO skipped_firings VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"),
                    [(recurring.id, recurring.revision, s.firing_ms, s.reason, now_ms)
                     for s in expansion.skipped])
            return applied

        return self._work(work)

    def recurring_firings(self, recurring_id: str, *, after_ms: int = -1,
                          limit: int = 100) -> builtins.list[FiringRecord]:
        self.get_recurring(recurring_id)
        expanded = self._rows(
            "SELECT firing_ms, status, count(*), min(due_ms) FROM schedules "
            "WHERE recurring_id = ? AND firing_ms > ? GROUP BY firing_ms, status",
            (recurring_id, after_ms))
        skipped = self._rows(
            "SELECT firing_ms, reason FROM skipped_firings WHERE recurring_id = ? "
            "AND firing_ms > ?", (recurring_id, after_ms))
        reasons = {int(f): r for f, r in skipped}
        counts: dict[int, dict[str, int]] = {}
        first_due: dict[int, int] = {}
        for firing_ms, status, n, due_ms in expanded:
            counts.setdefault(int(firing_ms), {})[str(status)] = int(n)
            first_due[int(firing_ms)] = min(int(due_ms), first_due.get(int(firing_ms), due_ms))
        records = []
        for firing_ms in sorted(set(counts) | set(reasons))[:limit]:
            messages = counts.get(firing_ms, {})
            if any(n for status, n in messages.items() if status != Status.CANCELLED.value):
                outcome, reason = "expanded", None
            elif firing_ms in reasons:
                outcome, reason = "skipped", reasons[firing_ms]
            else:  # expanded, then cancelled (its recurring changed or was deleted)
                outcome, reason = "cancelled", None
            records.append(FiringRecord(firing_ms, outcome, reason, first_due.get(firing_ms),
                                        messages))
        return records

    # -- tenants ---------------------------------------------------------------------------

    def put_tenant(self, tenant: Tenant, *, now_ms: int) -> Tenant:
        d = self._dialect
        self._work(lambda conn: conn.execute(d.q(
            "INSERT INTO tenants VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE "
            "SET durability = excluded.durability, updated_ms = excluded.updated_ms"),
            (tenant.name, tenant.durability.value, now_ms)))
        return tenant._replace(configured=True)

    def get_tenant(self, name: str) -> Tenant:
        rows = self._rows("SELECT name, durability FROM tenants WHERE name = ?", (name,))
        return Tenant(rows[0][0], Durability(rows[0][1])) if rows else Tenant(name,
                                                                              configured=False)

    def list_tenants(self) -> builtins.list[Tenant]:
        return [Tenant(n, Durability(v))
                for n, v in self._rows("SELECT name, durability FROM tenants ORDER BY name")]

    # -- policies --------------------------------------------------------------------------

    def put_policy(self, policy: Policy, *, now_ms: int) -> Policy:
        d = self._dialect
        self._work(lambda conn: conn.execute(d.q(
            f"INSERT INTO policies ({POLICY_COLUMNS}, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (name) DO UPDATE SET max_in_flight = excluded.max_in_flight, "
            "rate = excluded.rate, token_lease_ms = excluded.token_lease_ms"),
            (policy.name, policy.max_in_flight, policy.rate, policy.token_lease_ms,
             policy.burst, now_ms, now_ms)))
        return policy

    def get_policy(self, name: str) -> Policy:
        rows = self._rows(f"SELECT {POLICY_COLUMNS} FROM policies WHERE name = ?", (name,))
        if not rows:
            raise NotFoundError("policy", name)
        return policy_from_row(rows[0])[0]

    def list_policies(self) -> builtins.list[Policy]:
        rows = self._rows(f"SELECT {POLICY_COLUMNS} FROM policies ORDER BY name")
        return [policy_from_row(r)[0] for r in rows]

    def delete_policy(self, name: str) -> None:
        d = self._dialect

        def work(conn: Any) -> int:
            users = conn.execute(d.q(
                "SELECT (SELECT count(*) FROM schedules WHERE policy = ? "
                "AND status IN ('PENDING', 'CLAIMED')), "
                "(SELECT count(*) FROM recurring WHERE policy = ?)"), (name, name)).fetchone()
            if users[0] or users[1]:
                raise ConflictError(
                    f"policy {name!r} is still named by {users[0]} waiting schedules and "
                    f"{users[1]} recurring schedules", ident=name)
            conn.execute(d.q("DELETE FROM tokens WHERE policy = ?"), (name,))
            return int(conn.execute(d.q("DELETE FROM policies WHERE name = ?"),
                                    (name,)).rowcount)

        if not self._work(work):
            raise NotFoundError("policy", name)

    def in_flight(self, name: str, *, now_ms: int) -> int:
        rows = self._rows("SELECT count(*) FROM tokens WHERE policy = ? AND expires_ms > ?",
                          (name, now_ms))
        return int(rows[0][0])

    def release(self, delivery: str, *, now_ms: int) -> bool:
        d = self._dialect
        gone = self._work(lambda conn: conn.execute(
            d.q("DELETE FROM tokens WHERE delivery_id = ? AND expires_ms > ?"),
            (delivery, now_ms)).rowcount)
        return bool(gone)


def all_relaxed(conn: Any, d: Dialect, tenants: set[str]) -> bool:
    """True when every tenant in ``tenants`` is configured ``relaxed`` (a write that touches
    any strict tenant is committed strictly)."""
    if not tenants:
        return False
    marks = ", ".join("?" * len(tenants))
    row = conn.execute(d.q(f"SELECT count(*) FROM tenants WHERE durability = 'relaxed' "
                           f"AND name IN ({marks})"), tuple(tenants)).fetchone()
    return int(row[0]) == len(tenants)


def _check_policy(conn: Any, d: Dialect, name: str | None) -> None:
    if name is not None and conn.execute(d.q("SELECT 1 FROM policies WHERE name = ?"),
                                         (name,)).fetchone() is None:
        from tocsin.errors import ValidationError

        raise ValidationError("policy", f"policy {name!r} is not registered")


def claim_throttled(conn: Any, d: Dialect, *, epoch: int, bucket_lo: int, bucket_hi: int,
                    until_ms: int, now_ms: int, limit: int) -> list[tuple[Any, ...]]:
    """Claim, inside the caller's claim transaction, due schedules of bucket range
    ``[bucket_lo, bucket_hi]`` that name a policy: for each such policy, as many as it has free
    tokens (``max_in_flight`` minus the live tokens, and the rate bucket's whole tokens), the
    earliest first; each claimed delivery takes a token. Rows are ``CLAIM_COLUMNS`` plus
    ``next_ms``, each policy's earliest first."""
    policies = conn.execute(d.q(
        f"SELECT {', '.join('p.' + c for c in POLICY_COLUMNS.split(', '))} FROM policies p "
        "WHERE EXISTS (SELECT 1 FROM schedules s WHERE s.policy = p.name "
        "AND s.status = 'PENDING' AND s.next_ms <= ? AND s.bucket BETWEEN ? AND ?) "
        f"ORDER BY p.name{d.lock_policy}"), (until_ms, bucket_lo, bucket_hi)).fetchall()
    claimed: list[tuple[Any, ...]] = []
    for row in policies:
        if len(claimed) >= limit:
            break
        policy, rate = policy_from_row(row)
        conn.execute(d.q("DELETE FROM tokens WHERE policy = ? AND expires_ms <= ?"),
                     (policy.name, now_ms))
        held = conn.execute(d.q("SELECT count(*) FROM tokens WHERE policy = ?"),
                            (policy.name,)).fetchone()[0]
        tokens = rate.refill(policy, now_ms)
        free = min(policy.max_in_flight - int(held), limit - len(claimed),
                   math.floor(tokens) if math.isfinite(tokens) else limit)
        if free <= 0:
            continue
        got = sorted(conn.execute(d.q(
            "UPDATE schedules SET status = 'CLAIMED', claim_epoch = ?, claimed_ms = ? "
            "WHERE id IN (SELECT s.id FROM schedules s WHERE s.status = 'PENDING' "
            "AND s.policy = ? AND s.bucket BETWEEN ? AND ? AND s.next_ms <= ? "
            f"AND {d.head} ORDER BY s.next_ms LIMIT ?{d.skip_locked}) "
            f"RETURNING {CLAIM_COLUMNS}, next_ms"),
            (epoch, now_ms, policy.name, bucket_lo, bucket_hi, until_ms, free)).fetchall(),
            key=lambda r: (r[-1], r[0]))
        _executemany(conn, d.q(
            "INSERT INTO tokens VALUES (?, ?, ?, ?, ?) ON CONFLICT (delivery_id) DO UPDATE "
            "SET taken_ms = excluded.taken_ms, expires_ms = excluded.expires_ms"),
            [(delivery_id(r[0], r[7]), policy.name, r[0], now_ms,
              now_ms + policy.token_lease_ms) for r in got])
        if policy.rate is not None:
            conn.execute(d.q("UPDATE policies SET rate_tokens = ?, rate_ms = ? WHERE name = ?"),
                         (tokens - len(got), now_ms, policy.name))
        claimed += [tuple(r) for r in got]
    return claimed


def return_tokens(conn: Any, d: Dialect, deliveries: Sequence[str]) -> None:
    """Give back the tokens of deliveries that failed (the consumer never held them)."""
    _executemany(conn, d.q("DELETE FROM tokens WHERE delivery_id = ?"),
                 [(x,) for x in deliveries])


def throttled_next_ms(conn: Any, d: Dialect, *, now_ms: int) -> int | None:
    """The earliest time a schedule waiting on a policy can be claimed: its next time once the
    policy has a free token, or else when a held token's lease runs out."""
    rows = conn.execute(d.q(
        f"SELECT {', '.join('p.' + c for c in POLICY_COLUMNS.split(', '))}, "
        "(SELECT min(s.next_ms) FROM schedules s WHERE s.policy = p.name "
        "AND s.status = 'PENDING'), "
        "(SELECT count(*) FROM tokens t WHERE t.policy = p.name AND t.expires_ms > ?), "
        "(SELECT min(t.expires_ms) FROM tokens t WHERE t.policy = p.name AND t.expires_ms > ?) "
        "FROM policies p"), (now_ms, now_ms)).fetchall()
    times = []
    for row in rows:
        waiting, held, returns = row[6], int(row[7]), row[8]
        if waiting is None:
            continue
        policy, rate = policy_from_row(row[:6])
        ready = rate.ready_ms(policy, now_ms) if held < policy.max_in_flight else returns
        times.append(max(int(waiting), int(ready if ready is not None else now_ms)))
    return min(times) if times else None

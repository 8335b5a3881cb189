"""Throttling policies, namespaced by tenant (:class:`~tocsin.abc.PolicyStore`), and the token
bookkeeping the claim and the acknowledgement do inside their own transactions. A schedule
draws on the policy (its tenant, its ``policy`` name)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from tocsin.abc import PolicyStore
from tocsin.domain import Policy, RateBucket
from tocsin.errors import ConflictError, NotFoundError
from tocsin.ids import delivery_id
from tocsin.stores.rows import CLAIM_COLUMNS
from tocsin.stores.sql.base import Dialect, SqlBase, executemany, sent, tenant_is
from tocsin.stores.sql.operations import not_paused

__all__ = [
    "POLICY_COLUMNS",
    "SqlPolicies",
    "claim_throttled",
    "policy_from_row",
    "return_tokens",
    "send_throttled_due",
    "send_throttled_next_ms",
    "throttled_next_ms",
]

POLICY_COLUMNS = "name, max_in_flight, rate, token_lease_ms, rate_tokens, rate_ms, tenant"
_P_COLUMNS = ", ".join("p." + c for c in POLICY_COLUMNS.split(", "))


def policy_from_row(row: Sequence[Any]) -> tuple[Policy, RateBucket]:
    """A ``POLICY_COLUMNS`` row as a policy and its rate bucket."""
    policy = Policy(name=row[0], max_in_flight=row[1], rate=row[2], token_lease_ms=row[3],
                    tenant=row[6])
    return policy, RateBucket(float(row[4]), int(row[5]))


class SqlPolicies(SqlBase, PolicyStore):
    """The :class:`~tocsin.abc.PolicyStore` role over a backend's ``_work``."""

    def put_policy(self, policy: Policy, *, now_ms: int) -> Policy:
        self._changed(
            f"INSERT INTO policies ({POLICY_COLUMNS}, created_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT (tenant, name) DO UPDATE SET max_in_flight = excluded.max_in_flight, "
            "rate = excluded.rate, token_lease_ms = excluded.token_lease_ms",
            (policy.name, policy.max_in_flight, policy.rate, policy.token_lease_ms,
             policy.burst, now_ms, policy.tenant, now_ms))
        return policy

    def get_policy(self, name: str, *, tenant: str) -> Policy:
        rows = self._rows(f"SELECT {POLICY_COLUMNS} FROM policies WHERE tenant = ? AND name = ?",
                          (tenant, name))
        if not rows:
            raise NotFoundError("policy", name)
        return policy_from_row(rows[0])[0]

    def list_policies(self, *, tenant: str | None = None) -> list[Policy]:
        rows = self._rows(f"SELECT {POLICY_COLUMNS} FROM policies WHERE {tenant_is()} "
                          "ORDER BY tenant, name", (tenant, tenant))
        return [policy_from_row(r)[0] for r in rows]

    def delete_policy(self, name: str, *, tenant: str) -> None:
        d = self._dialect

        def work(conn: Any) -> int:
            users = conn.execute(d.q(
                "SELECT (SELECT count(*) FROM schedules WHERE tenant = ? AND policy = ? "
                "AND status IN ('PENDING', 'CLAIMED')), "
                "(SELECT count(*) FROM recurring WHERE tenant = ? AND policy = ?)"),
                (tenant, name, tenant, name)).fetchone()
            if users[0] or users[1]:
                raise ConflictError(
                    f"policy {name!r} is still named by {users[0]} waiting schedules and "
                    f"{users[1]} recurring schedules", ident=name)
            conn.execute(d.q("DELETE FROM tokens WHERE tenant = ? AND policy = ?"),
                         (tenant, name))
            return int(conn.execute(d.q("DELETE FROM policies WHERE tenant = ? AND name = ?"),
                                    (tenant, name)).rowcount)

        if not self._work(work):
            raise NotFoundError("policy", name)

    def in_flight(self, name: str, *, tenant: str, now_ms: int) -> int:
        rows = self._rows("SELECT count(*) FROM tokens WHERE tenant = ? AND policy = ? "
                          "AND expires_ms > ?", (tenant, name, now_ms))
        return int(rows[0][0])

    def release(self, delivery: str, *, now_ms: int, tenant: str | None = None) -> bool:
        return bool(self._changed(
            f"DELETE FROM tokens WHERE delivery_id = ? AND expires_ms > ? AND {tenant_is()}",
            (delivery, now_ms, tenant, tenant)))


_DUE_POLICIES = (f"SELECT {_P_COLUMNS} FROM policies p "
                 "WHERE EXISTS (SELECT 1 FROM schedules s WHERE s.tenant = p.tenant "
                 "AND s.policy = p.name AND s.status = 'PENDING' AND s.next_ms <= ? "
                 "AND s.bucket BETWEEN ? AND ?) ORDER BY p.tenant, p.name")
"""The policies with a schedule due by a time (first argument) in a bucket range (two
more)."""


def send_throttled_due(conn: Any, d: Dialect, *, bucket_lo: int, bucket_hi: int,
                       until_ms: int) -> Callable[[], bool]:
    """Whether a policy has a schedule of bucket range ``[bucket_lo, bucket_hi]`` due by
    ``until_ms``, read without a lock: sent now, with a claim's first statements, and read
    when called (:func:`~tocsin.stores.sql.base.sent`). A claim with room left takes the
    policies' locks (:func:`claim_throttled`) only when one has: most have none, and their
    locked read was a round trip of every claim."""
    rows = sent(conn, d, d.q(f"{_DUE_POLICIES} LIMIT 1"), (until_ms, bucket_lo, bucket_hi))
    return lambda: bool(rows())


def claim_throttled(conn: Any, d: Dialect, *, epoch: int, bucket_lo: int, bucket_hi: int,
                    until_ms: int, now_ms: int, limit: int) -> list[tuple[Any, ...]]:
    """Claim, inside the caller's claim transaction, due schedules of bucket range
    ``[bucket_lo, bucket_hi]`` that name a policy: for each such policy, those of the range
    among its ``free`` earliest due schedules (over every bucket), where ``free`` is what it has
    of free tokens (``max_in_flight`` minus the live tokens, and the rate bucket's whole
    tokens); each claimed delivery takes a token. The policy's row lock orders the ranges'
    claims, so tokens stay exact however its schedules are spread, and a policy's earliest go
    first whichever task claims them. Rows are ``CLAIM_COLUMNS`` plus ``next_ms``, each
    policy's earliest first."""
    policies = conn.execute(d.q(_DUE_POLICIES + d.lock_policy),
                            (until_ms, bucket_lo, bucket_hi)).fetchall()
    claimed: list[tuple[Any, ...]] = []
    for row in policies:
        if len(claimed) >= limit:
            break
        policy, rate = policy_from_row(row)
        key = (policy.tenant, policy.name)
        conn.execute(d.q("DELETE FROM tokens WHERE tenant = ? AND policy = ? "
                         "AND expires_ms <= ?"), (*key, now_ms))
        held = conn.execute(d.q("SELECT count(*) FROM tokens WHERE tenant = ? AND policy = ?"),
                            key).fetchone()[0]
        tokens = rate.refill(policy, now_ms)
        free = min(policy.max_in_flight - int(held), limit - len(claimed),
                   math.floor(tokens) if math.isfinite(tokens) else limit)
        if free <= 0:
            continue
        # MATERIALIZED: the policy's earliest are chosen once (PostgreSQL would otherwise
        # re-run a limited subquery per candidate row), then this range's part is claimed.
        got = sorted(conn.execute(d.q(
            "WITH earliest AS MATERIALIZED (SELECT s.id FROM schedules s "
            "WHERE s.status = 'PENDING' AND s.tenant = ? AND s.policy = ? AND s.next_ms <= ? "
            f"AND {d.head} AND {not_paused(d)} ORDER BY s.next_ms, s.id LIMIT ?) "
            "UPDATE schedules SET status = 'CLAIMED', claim_epoch = ?, claimed_ms = ? "
            f"WHERE {d.among('SELECT id FROM earliest')} AND status = 'PENDING' "
            f"AND bucket BETWEEN ? AND ? RETURNING {CLAIM_COLUMNS}, next_ms"),
            (*key, until_ms, free, epoch, now_ms, bucket_lo, bucket_hi)).fetchall(),
            key=lambda r: (r[-1], r[0]))
        executemany(conn, d.q(
            "INSERT INTO tokens (delivery_id, policy, schedule_id, taken_ms, expires_ms, tenant) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (delivery_id) DO UPDATE "
            "SET taken_ms = excluded.taken_ms, expires_ms = excluded.expires_ms"),
            [(delivery_id(r[0], r[7]), policy.name, r[0], now_ms,
              now_ms + policy.token_lease_ms, policy.tenant) for r in got])
        if policy.rate is not None:
            conn.execute(d.q("UPDATE policies SET rate_tokens = ?, rate_ms = ? "
                             "WHERE tenant = ? AND name = ?"),
                         (tokens - len(got), now_ms, *key))
        claimed += [tuple(r) for r in got]
    return claimed


def return_tokens(conn: Any, d: Dialect, deliveries: Sequence[str]) -> None:
    """Give back the tokens of deliveries that failed (the consumer never held them)."""
    executemany(conn, d.q("DELETE FROM tokens WHERE delivery_id = ?"),
                [(x,) for x in deliveries])


def throttled_next_ms(conn: Any, d: Dialect, *, now_ms: int) -> int | None:
    """The earliest time a schedule waiting on a policy can be claimed: its next time once the
    policy has a free token, or else when a held token's lease runs out."""
    return send_throttled_next_ms(conn, d, now_ms=now_ms)()


def send_throttled_next_ms(conn: Any, d: Dialect, *, now_ms: int) -> Callable[[], int | None]:
    """:func:`throttled_next_ms`, sent now and read when called
    (:func:`~tocsin.stores.sql.base.sent`)."""
    rows = sent(conn, d, d.q(
        f"SELECT {_P_COLUMNS}, "
        "(SELECT min(s.next_ms) FROM schedules s WHERE s.tenant = p.tenant "
        "AND s.policy = p.name AND s.status = 'PENDING'), "
        "(SELECT count(*) FROM tokens t WHERE t.tenant = p.tenant AND t.policy = p.name "
        "AND t.expires_ms > ?), "
        "(SELECT min(t.expires_ms) FROM tokens t WHERE t.tenant = p.tenant "
        "AND t.policy = p.name AND t.expires_ms > ?) FROM policies p"),
        (now_ms, now_ms))

    def read() -> int | None:
        times = []
        for row in rows():
            waiting, held, returns = row[7], int(row[8]), row[9]
            if waiting is None:
                continue
            policy, rate = policy_from_row(row[:7])
            ready = rate.ready_ms(policy, now_ms) if held < policy.max_in_flight else returns
            times.append(max(int(waiting), int(ready if ready is not None else now_ms)))
        return min(times) if times else None

    return read

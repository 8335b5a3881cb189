"""Two tenants on one real API server, and fresh objects of every noun for tenant A: for the
route matrix (tests/api/test_tenancy.py) and the regression tests of tenant isolation
(tests/api/test_isolation.py)."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from tocsin.abc import ClaimedRow, Store
from tocsin.apikeys.tokens import issue_key, new_token
from tocsin.domain import Ack, Outcome, Role, Status

__all__ = ["A", "B", "Tenants", "two_tenants"]

A, B = "acme", "globex"


@dataclass
class Tenants:
    """Clients of one server: ``admin``, tenant ``a`` (and its read-only twin ``a_ro``),
    tenant ``b``, ``anon`` (no key) and ``forged`` (a well-formed key the store never saw)."""

    store: Store
    tmp: Path
    admin: httpx.Client
    a: httpx.Client
    a_ro: httpx.Client
    b: httpx.Client
    anon: httpx.Client
    forged: httpx.Client
    _n: Iterator[int] = field(default_factory=itertools.count)

    def fresh(self, prefix: str) -> str:
        """A name no tenant has used yet."""
        return f"{prefix}-{next(self._n)}"

    def schedule(self, **body: Any) -> dict[str, Any]:
        """A new PENDING schedule of A's (due in an hour unless ``body`` says otherwise)."""
        timing = {} if "due_at" in body else {"delay": 3600}
        r = self.a.post("/v1/schedules", json={"channel": "out", "payload": {"of": A},
                                               **timing, **body})
        assert r.status_code == 201, r.text
        made: dict[str, Any] = r.json()
        return made

    def recurring(self) -> str:
        """A new recurring rule of A's."""
        r = self.a.post("/v1/recurring", json={"cron": "0 9 * * *", "channel": "out",
                                                "payload": {"of": A}})
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def channel(self) -> str:
        """A new file channel of A's."""
        name = self.fresh("ch")
        r = self.a.post("/v1/channels", json={"name": name, "kind": "file", "config": {
            "path": f"{self.tmp.name}-{name}.jsonl"}})  # under the tenant's own root
        assert r.status_code == 201, r.text
        return name

    def policy(self) -> str:
        """A new throttling policy of A's."""
        name = self.fresh("pol")
        r = self.a.post("/v1/policies", json={"name": name, "max_in_flight": 100})
        assert r.status_code == 201, r.text
        return name

    def claimed(self, **body: Any) -> ClaimedRow:
        """A schedule of A's, due now and claimed by a dispatcher epoch."""
        made = self.schedule(delay=0, **body)
        now = time.time_ns() // 1_000_000
        rows = self.store.claim(epoch=self.store.next_epoch(), bucket_lo=made["bucket"],
                                bucket_hi=made["bucket"], until_ms=now, now_ms=now,
                                lease_ms=600_000, limit=10_000)
        [row] = [r for r in rows if r.id == made["id"]]
        return row

    def halted_key(self) -> str:
        """An ordering key of A's, halted by its dead schedule."""
        key = self.fresh("ok")
        row = self.claimed(ordering_key=key)
        now = time.time_ns() // 1_000_000
        self.store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
            schedule_id=row.id, delivery_id=f"{row.id}-{row.attempt}", attempt=row.attempt,
            outcome=Outcome.REJECTED, error="refused", started_ms=now, ended_ms=now,
            due_ms=row.due_ms, status=Status.DEAD, halt=True)])
        return key

    def dead(self, **body: Any) -> str:
        """A schedule of A's that died on its first attempt."""
        row = self.claimed(**body)
        now = time.time_ns() // 1_000_000
        self.store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
            schedule_id=row.id, delivery_id=f"{row.id}-{row.attempt}", attempt=row.attempt,
            outcome=Outcome.REJECTED, error="refused", started_ms=now, ended_ms=now,
            due_ms=row.due_ms, status=Status.DEAD)])
        return row.id

    def paused(self) -> str:
        """A new channel of A's, paused."""
        name = self.channel()
        r = self.a.post(f"/v1/channels/{name}/pause")
        assert r.status_code == 200, r.text
        return name

    def held_token(self) -> str:
        """The delivery id of a claimed schedule of A's that holds one of its policy's
        tokens."""
        row = self.claimed(policy=self.policy())
        return f"{row.id}-{row.attempt}"

    def key_id(self) -> str:
        """A new tenant key of A's."""
        return issue_key(self.store, role=Role.TENANT, tenant=A, now_ms=0)[0].id


def _client(url: str, token: str | None) -> httpx.Client:
    headers = {"authorization": f"Bearer {token}"} if token else {}
    return httpx.Client(base_url=url, timeout=30, headers=headers)


def two_tenants(store: Store, url: str, admin_key: str, tmp: Path) -> Iterator[Tenants]:
    """The clients of :class:`Tenants` on the server at ``url``, each tenant with a file
    channel ``out`` (two channels of one name), and A's tenant settings configured."""
    tokens = {name: issue_key(store, role=Role.TENANT, tenant=tenant, read_only=ro,
                              now_ms=0)[1]
              for name, tenant, ro in (("a", A, False), ("a_ro", A, True), ("b", B, False))}
    with ExitStack() as stack:
        clients = {name: stack.enter_context(_client(url, token)) for name, token in
                   [("admin", admin_key), *tokens.items(), ("anon", None),
                    ("forged", new_token()[1])]}
        tenants = Tenants(store=store, tmp=tmp, **clients)
        for who in (tenants.a, tenants.b):
            r = who.post("/v1/channels", json={"name": "out", "kind": "file", "config": {
                "path": f"{tmp.name}-out-{id(who)}.jsonl"}})
            assert r.status_code == 201, r.text
        r = tenants.admin.put(f"/v1/tenants/{A}", json={"durability": "strict"})
        assert r.status_code == 200, r.text
        yield tenants

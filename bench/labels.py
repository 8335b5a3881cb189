"""A label selector over many schedules: ``GET /v1/schedules?label=`` against the same list
without a selector (the peer), side by side in one run, on SQLite and PostgreSQL.

    bench/run labels [--schedules 10000000] [--pg-schedules 2000000] [--requests 100]
                     [--stores sqlite,postgres] [--keep]

Each store is filled straight through SQL (``INSERT … SELECT`` of generated rows, chunks of
500 000 a transaction; the store's own triggers keep ``schedule_labels``): schedule ``i`` is
tenant ``acme`` when ``i % 7 == 0`` else ``default``, PENDING one in five (due in the future)
else DELIVERED, on one of 8 channels, labelled ``team=t<i % 10>`` (a pair carried by 10 %)
and ``campaign=c<i % 1000>`` (0.1 %). A real uvicorn server (:class:`ApiServer`, loopback)
serves the store; one client asks, round robin, ``--requests`` times each:

============== ==============================================================================
kind           request (``limit=100``)
============== ==============================================================================
peer           ``GET /v1/schedules`` (admin key: every tenant)
rare           ``label=campaign=c42`` (admin)
common         ``label=team=t3`` (admin)
two_pairs      ``label=team=t3,campaign=c43`` (admin; the rarer pair is walked)
deep_page      ``label=campaign=c42`` from a cursor half way through the ids (admin)
tenant_peer    ``GET /v1/schedules`` with a tenant key (``default``)
tenant_common  ``label=team=t3`` with that tenant key
============== ==============================================================================

and, ``--stats-requests`` times, ``GET /v1/stats?label=campaign=c42`` beside ``GET
/v1/stats``. The figures are p50 and p99 in milliseconds and each kind's p50 over its peer's
(``<store>_<kind>_over_peer``). The plans of the list statements (``EXPLAIN``) are kept beside
them: they must read ``schedule_labels`` by its index in id order, with no sort of every match;
and the store's time for a page by the former statement (``id IN (SELECT schedule_id …)``),
``<store>_id_in_form_<plan>_ms``.
Bounded: 7 list requests ``--requests`` times and 2 stats requests ``--stats-requests`` times
a store.
Results: ``bench/results/labels.json``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from bench.common import write_results
from tocsin.abc import Store
from tocsin.apikeys.tokens import issue_key
from tocsin.domain import Role
from tocsin.stores import open_store
from tocsin.stores.rows import SCHEDULE_COLUMNS, list_filters
from tocsin.stores.sql.labels import rarest_first, selected
from tocsin.testing.api_server import ApiServer

RESULTS = Path(__file__).parent / "results" / "labels.json"
CHUNK = 500_000
BASE_MS = 1_800_000_000_000
"""Due times start here (2027): the pending ones are in the future, nothing fires."""
BUCKETS = 64

_SQLITE_FILL = """
WITH RECURSIVE g(i) AS (SELECT ? UNION ALL SELECT i + 1 FROM g WHERE i + 1 < ?)
INSERT INTO schedules (id, tenant, channel, payload, payload_kind, headers, due_ms, next_ms,
    bucket, status, attempts, created_ms, delivered_ms, labels)
SELECT printf('b%011d', i), CASE WHEN i % 7 = 0 THEN 'acme' ELSE 'default' END,
    'ch' || (i % 8), x'7b7d', 'json', '{}', ? + i * 10, ? + i * 10, i % 64,
    CASE WHEN i % 5 = 0 THEN 'PENDING' ELSE 'DELIVERED' END, 0, ? + i,
    CASE WHEN i % 5 = 0 THEN NULL ELSE ? + i * 10 END,
    '{"campaign":"c' || (i % 1000) || '","team":"t' || (i % 10) || '"}'
FROM g"""
_POSTGRES_FILL = """
INSERT INTO schedules (id, tenant, channel, payload, payload_kind, headers, due_ms, next_ms,
    bucket, status, attempts, created_ms, delivered_ms, labels)
SELECT 'b' || lpad(i::text, 11, '0'), CASE WHEN mod(i, 7) = 0 THEN 'acme' ELSE 'default' END,
    'ch' || mod(i, 8), '\\x7b7d'::bytea, 'json', '{}', %(base)s + i * 10, %(base)s + i * 10,
    mod(i, 64), CASE WHEN mod(i, 5) = 0 THEN 'PENDING' ELSE 'DELIVERED' END, 0, %(base)s + i,
    CASE WHEN mod(i, 5) = 0 THEN NULL ELSE %(base)s + i * 10 END,
    '{"campaign":"c' || mod(i, 1000) || '","team":"t' || mod(i, 10) || '"}'
FROM generate_series(%(lo)s::bigint, %(hi)s::bigint - 1) AS i"""

KINDS: dict[str, tuple[str, dict[str, str]]] = {
    "peer": ("admin", {}),
    "rare": ("admin", {"label": "campaign=c42"}),
    "common": ("admin", {"label": "team=t3"}),
    "two_pairs": ("admin", {"label": "team=t3,campaign=c43"}),
    "deep_page": ("admin", {"label": "campaign=c42"}),  # the cursor is set per store
    "tenant_peer": ("tenant", {}),
    "tenant_common": ("tenant", {"label": "team=t3"}),
}
"""Each kind of request: whose key asks, and its parameters besides ``limit=100``."""
PLANS = {"admin_rare": (None, (("campaign", "c42"),)),
         "admin_two_pairs": (None, (("campaign", "c43"), ("team", "t3"))),
         "tenant_common": ("default", (("team", "t3"),))}


def _fill_sqlite(path: Path, count: int) -> float:
    import sqlite3

    open_store(f"sqlite:///{path}", buckets=BUCKETS).close()  # the schema, every migration
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA synchronous=OFF")
    conn.execute("PRAGMA cache_size=-1000000")
    started = time.monotonic()
    for lo in range(0, count, CHUNK):
        hi = min(count, lo + CHUNK)
        conn.execute("BEGIN")
        conn.execute(_SQLITE_FILL, (lo, hi, BASE_MS, BASE_MS, BASE_MS, BASE_MS))
        conn.execute("COMMIT")
        print(f"sqlite: {hi:,} schedules in {time.monotonic() - started:.0f} s", flush=True)
    conn.close()
    return time.monotonic() - started


def _fill_postgres(url: str, count: int) -> float:
    import psycopg

    open_store(url, buckets=BUCKETS).close()
    started = time.monotonic()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET synchronous_commit = off")
        for lo in range(0, count, CHUNK):
            hi = min(count, lo + CHUNK)
            conn.execute(_POSTGRES_FILL.encode(), {"base": BASE_MS, "lo": lo, "hi": hi})
            print(f"postgres: {hi:,} schedules in {time.monotonic() - started:.0f} s",
                  flush=True)
        # What autovacuum does within a minute of a bulk write: the planner's statistics.
        conn.execute("ANALYZE")
    return time.monotonic() - started


def _plans(store: Any, postgres: bool) -> dict[str, str]:
    """``EXPLAIN`` of the list statement the store runs for each of :data:`PLANS`."""
    out = {}
    for name, (tenant, pairs) in PLANS.items():
        pairs = rarest_first(store, pairs, tenant=tenant)
        where, args = list_filters("?", status=None, channel=None, due_from_ms=None,
                                   due_to_ms=None, after_id=None, tenant=tenant)
        source, source_args = selected(pairs, tenant=tenant)
        sql = (f"SELECT {SCHEDULE_COLUMNS} FROM {source} WHERE {where} ORDER BY id "
               "LIMIT 101")
        explain = "EXPLAIN " if postgres else "EXPLAIN QUERY PLAN "
        rows = store._rows(explain + sql, (*source_args, *args))
        out[name] = "\n".join(str(r[0] if postgres else r[-1]) for r in rows)
    return out


def _id_in_form(store: Any) -> dict[str, float]:
    """Milliseconds of a page by the former statement, ``id IN (SELECT schedule_id FROM
    schedule_labels WHERE ...)`` (median of 3), for each of :data:`PLANS`: why a page now
    walks the index instead."""
    out = {}
    for name, (tenant, pairs) in PLANS.items():
        clauses, args = [], []
        for key, value in pairs:
            scope = "" if tenant is None else "tenant = ? AND "
            clauses.append(f"id IN (SELECT schedule_id FROM schedule_labels WHERE {scope}"
                           "key = ? AND value = ?)")
            args += ([] if tenant is None else [tenant]) + [key, value]
        if tenant is not None:
            clauses.append("tenant = ?")
            args.append(tenant)
        sql = (f"SELECT {SCHEDULE_COLUMNS} FROM schedules WHERE {' AND '.join(clauses)} "
               "ORDER BY id LIMIT 101")
        times = []
        for _ in range(3):
            started = time.perf_counter()
            store._rows(sql, args)
            times.append((time.perf_counter() - started) * 1000)
        out[f"id_in_form_{name}_ms"] = round(statistics.median(times), 1)
    return out


def _percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, -(-int(p * len(ordered)) // 100) - 1))]


def _time(client: httpx.Client, path: str, params: dict[str, Any],
          check: Callable[[dict[str, Any]], None]) -> float:
    started = time.perf_counter()
    r = client.get(path, params=params)
    elapsed = (time.perf_counter() - started) * 1000
    if r.status_code != 200:
        raise RuntimeError(f"{path} {params}: {r.status_code} {r.text[:300]}")
    check(r.json())
    return elapsed


def _labelled(params: dict[str, str], full: bool) -> Callable[[dict[str, Any]], None]:
    """A check of a page: every item carries the selector's pairs; ``full``: 100 of them."""
    pairs = dict(p.split("=") for p in params.get("label", "").split(",") if p)

    def check(body: dict[str, Any]) -> None:
        items = body["items"]
        if not items or (full and len(items) != 100) or any(
                any(s["labels"].get(k) != v for k, v in pairs.items()) for s in items):
            raise RuntimeError(f"a page of {params} is not 100 matching schedules")

    return check


def _measure(store: Store, args: argparse.Namespace, count: int) -> dict[str, Any]:
    server = ApiServer(store).start()
    try:
        tenant_key = issue_key(store, role=Role.TENANT, tenant="default", now_ms=0)[1]
        keys = {"admin": server.admin_key, "tenant": tenant_key}
        clients = {who: httpx.Client(base_url=server.url, timeout=120,
                                     headers={"authorization": f"Bearer {key}"})
                   for who, key in keys.items()}
        half = f"b{count // 2:011d}"
        times: dict[str, list[float]] = {kind: [] for kind in KINDS}
        for round_ in range(args.requests + 2):  # two rounds to warm up, not counted
            for kind, (who, extra) in KINDS.items():
                params: dict[str, Any] = {"limit": 100, **extra}
                if kind == "deep_page":
                    params["cursor"] = half
                took = _time(clients[who], "/v1/schedules", params,
                             _labelled(extra, full=kind != "deep_page"))
                if round_ >= 2:
                    times[kind].append(took)
        stats: dict[str, list[float]] = {"stats_peer": [], "stats_rare": []}
        for _ in range(args.stats_requests):
            stats["stats_peer"].append(_time(clients["admin"], "/v1/stats", {},
                                             lambda body: None))
            stats["stats_rare"].append(_time(clients["admin"], "/v1/stats",
                                             {"label": "campaign=c42"}, lambda body: None))
        for client in clients.values():
            client.close()
    finally:
        server.stop()
    out: dict[str, Any] = {}
    for kind, values in {**times, **stats}.items():
        out[f"{kind}_p50_ms"] = round(statistics.median(values), 2)
        out[f"{kind}_p99_ms"] = round(_percentile(values, 99), 2)
    for kind in KINDS:
        if kind not in ("peer", "tenant_peer"):
            peer = "tenant_peer" if kind.startswith("tenant") else "peer"
            out[f"{kind}_over_peer"] = round(out[f"{kind}_p50_ms"] / out[f"{peer}_p50_ms"], 2)
    out["stats_rare_over_peer"] = round(out["stats_rare_p50_ms"] / out["stats_peer_p50_ms"], 3)
    return out


@contextmanager
def _sqlite(args: argparse.Namespace, folder: Path) -> Iterator[tuple[Store, float]]:
    path = folder / "labels.db"
    fill_s = _fill_sqlite(path, args.schedules)
    store = open_store(f"sqlite:///{path}", buckets=BUCKETS)
    try:
        yield store, fill_s
    finally:
        store.close()


@contextmanager
def _postgres(args: argparse.Namespace) -> Iterator[tuple[Store, float]]:
    from tocsin.testing.postgres import throwaway_server

    with throwaway_server() as server:
        fill_s = _fill_postgres(server.url, args.pg_schedules)
        store = open_store(server.url, buckets=BUCKETS)
        try:
            yield store, fill_s
        finally:
            store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000_000,
                        help="Schedules in the SQLite store.")
    parser.add_argument("--pg-schedules", type=int, default=2_000_000,
                        help="Schedules in the PostgreSQL store.")
    parser.add_argument("--requests", type=int, default=100,
                        help="Requests of each kind, round robin.")
    parser.add_argument("--stats-requests", type=int, default=5,
                        help="GET /v1/stats with and without a selector, each.")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--keep", action="store_true", help="Keep the SQLite file.")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="tocsin-labels."))
    result: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()},
                              "kinds": {k: v[1] for k, v in KINDS.items()}}
    try:
        for kind in args.stores.split(","):
            count = args.schedules if kind == "sqlite" else args.pg_schedules
            opened = _sqlite(args, folder) if kind == "sqlite" else _postgres(args)
            with opened as (store, fill_s):
                result[f"{kind}_schedules"] = count
                result[f"{kind}_fill_s"] = round(fill_s, 1)
                result[f"{kind}_plans"] = _plans(store, kind == "postgres")
                for name, plan in result[f"{kind}_plans"].items():
                    print(f"{kind} plan {name}:\n{plan}", flush=True)
                figures = _measure(store, args, count)
                figures.update(_id_in_form(store))
                result.update({f"{kind}_{k}": v for k, v in figures.items()})
                print(json.dumps({k: v for k, v in result.items()
                                  if k.startswith(kind) and not k.endswith("plans")}),
                      flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(folder, ignore_errors=True)
    write_results(result, args.out)


if __name__ == "__main__":
    main()

"""Ingestion through the HTTP batch API, on SQLite and on PostgreSQL.

``--clients`` processes each POST ``--requests`` batches of ``--batch`` schedules
(``{"schedules": [...]}``) to ``tocsin api`` (``--replicas`` uvicorn processes, each client
bound to one), as fast as they are answered. Figures: schedules/s over the whole run and the
request latency p50/p99. The **peer**, side by side on the same store kind: the same number of
processes calling the store's ``create`` directly with the same batches — what the database
takes with no HTTP, JSON or validation in front. Then the cost of tenant durability: the same
load with the tenant ``strict`` and ``relaxed``, with ``--small-batch`` schedules per request
(where a commit's flush is not amortised over a thousand rows).

Writes bench/results/ingest-sqlite.json and bench/results/ingest-postgres.json
(``schedules_per_s``, ``latency_p50_ms``, ``latency_p99_ms``, ...). PostgreSQL is a throw-away
cluster started for the run (``.ci/postgres.sh``), unless ``--postgres-url`` names one.

    bench/run ingest [--stores sqlite,postgres] [--clients 4] [--requests 25] [--batch 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.common import free_port, machine_info, run_stamp, stop_group
from tocsin.domain import NewSchedule
from tocsin.stores import open_store
from tocsin.testing.postgres import create_schema, throwaway_server
from tocsin.testing.processes import start_tocsin

RESULTS = Path(__file__).parent / "results"


def _body(n: int, start: int, tenant: str) -> bytes:
    items = [{"channel": "out", "payload": {"order": start + i, "amount": 1250},
              "delay": 3600, "tenant": tenant} for i in range(n)]
    return json.dumps({"schedules": items}).encode()


def _client(url: str, requests: int, batch: int, offset: int, tenant: str,
            out: Any, go: Any) -> None:
    """One client process: POST batches back to back; report each request's latency."""
    latencies = []
    from tocsin.apikeys.keyfile import key_for

    headers = {"authorization": f"Bearer {key_for(url)}"}  # TOCSIN_API_KEY, set by prepared()
    with httpx.Client(base_url=url, timeout=120, headers=headers) as http:
        http.get("/healthz")
        out.put(None)  # ready
        go.wait()
        for r in range(requests):
            body = _body(batch, offset + r * batch, tenant)
            t = time.perf_counter()
            answer = http.post("/v1/schedules", content=body,
                               headers={"content-type": "application/json"})
            latencies.append((time.perf_counter() - t) * 1000)
            if answer.status_code != 201:
                raise SystemExit(f"HTTP {answer.status_code}: {answer.text[:300]}")
    out.put((latencies, time.time()))


def _direct(url: str, requests: int, batch: int, offset: int, tenant: str, out: Any,
            go: Any) -> None:
    """One peer process: the same batches straight into the store."""
    store = open_store(url)
    latencies = []
    out.put(None)
    go.wait()
    for r in range(requests):
        due = int(time.time() * 1000) + 3_600_000
        items = [NewSchedule(channel="out", tenant=tenant, due_ms=due,
                             payload=b'{"order":%d,"amount":1250}' % (offset + r * batch + i))
                 for i in range(batch)]
        t = time.perf_counter()
        store.create(items, now_ms=int(time.time() * 1000))
        latencies.append((time.perf_counter() - t) * 1000)
    store.close()
    out.put((latencies, time.time()))


def commit_latency(url: str, n: int = 300) -> dict[str, Any]:
    """One process, one schedule per create: the commit's own cost, strict vs relaxed."""
    store = open_store(url)
    out = {}
    for tenant, name in (("default", "strict"), ("fast", "relaxed")):
        times = []
        for i in range(n):
            item = NewSchedule(channel="out", tenant=tenant, payload=b'{"n":%d}' % i,
                               due_ms=int(time.time() * 1000) + 3_600_000)
            t = time.perf_counter()
            store.create([item], now_ms=int(time.time() * 1000))
            times.append((time.perf_counter() - t) * 1000)
        times.sort()
        out[name] = {"creates": n, "latency_p50_ms": round(times[n // 2], 3),
                     "latency_p99_ms": round(times[int(n * 0.99) - 1], 3),
                     "creates_per_s": round(n / (sum(times) / 1000))}
    store.close()
    return out


def _load(target: Any, urls: list[str], *, clients: int, requests: int, batch: int,
          tenant: str) -> dict[str, Any]:
    ctx = multiprocessing.get_context("spawn")
    queue, go = ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=target, args=(urls[c % len(urls)], requests, batch,
                                              c * requests * batch, tenant, queue, go))
             for c in range(clients)]
    for p in procs:
        p.start()
    for _ in procs:  # every process started and connected: the clock starts now
        assert queue.get(timeout=300) is None
    started = time.time()
    go.set()
    answers = [queue.get(timeout=900) for _ in procs]
    for p in procs:
        p.join()
    latencies = [x for lat, _ in answers for x in lat]
    seconds = max(end for _, end in answers) - started
    latencies.sort()
    total = clients * requests * batch

    def pct(q: float) -> float:
        return round(latencies[max(0, int(q * len(latencies) + 0.999999) - 1)], 1)

    return {"schedules": total, "seconds": round(seconds, 2),
            "schedules_per_s": round(total / seconds), "requests": len(latencies),
            "batch": batch, "clients": clients, "latency_p50_ms": pct(0.50),
            "latency_p99_ms": pct(0.99)}


@contextlib.contextmanager
def _apis(store_url: str, replicas: int, home: Path) -> Iterator[list[str]]:
    procs, urls = [], []
    try:
        for i in range(replicas):
            port = free_port()
            env = {"TOCSIN_STORE": store_url, "TOCSIN_API_PORT": str(port),
                   "TOCSIN_HOME": str(home)}
            procs.append(start_tocsin("api", env=env, log=home / f"api-{i}.log"))
            urls.append(f"http://127.0.0.1:{port}")
        for url in urls:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                if time.monotonic() > deadline:
                    raise SystemExit(f"the API at {url} did not start")
                time.sleep(0.2)
        yield urls
    finally:
        for proc in procs:
            stop_group(proc)


def _fresh(kind: str, server_url: str | None, home: Path) -> str:
    if kind == "sqlite":
        return f"sqlite:///{Path(tempfile.mkdtemp(dir=home)) / 'tocsin.db'}"
    assert server_url
    return create_schema(server_url)


def run_store(kind: str, server_url: str | None, args: argparse.Namespace) -> dict[str, Any]:
    home = Path(tempfile.mkdtemp(prefix=f"tocsin-ingest-{kind}-"))
    load = {"clients": args.clients, "requests": args.requests, "batch": args.batch}
    out: dict[str, Any] = {"benchmark": "ingest", "store": kind,
                           **run_stamp(), "replicas": args.replicas, **load}

    def prepared(url: str) -> str:
        store = open_store(url)
        from tocsin.apikeys.tokens import issue_key
        from tocsin.domain import ChannelKind, ChannelSpec, Durability, Role, Tenant

        for tenant in ("default", "fast"):  # channels are per tenant
            store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, tenant=tenant,
                                          config={"path": str(home / "out.jsonl")}))
        store.put_tenant(Tenant("fast", Durability.RELAXED), now_ms=0)
        # an admin key names the tenant of each batch; the client processes inherit it
        os.environ["TOCSIN_API_KEY"] = issue_key(store, role=Role.ADMIN, name="bench",
                                                 now_ms=0)[1]
        store.close()
        return url

    url = prepared(_fresh(kind, server_url, home))
    with _apis(url, args.replicas, home) as urls:
        tocsin = _load(_client, urls, tenant="default", **load)
        print(f"{kind} http: {tocsin}", file=sys.stderr)
        small = {**load, "batch": args.small_batch, "requests": args.small_requests}
        strict = _load(_client, urls, tenant="default", **small)
        relaxed = _load(_client, urls, tenant="fast", **small)
        print(f"{kind} strict {strict['schedules_per_s']}/s vs relaxed "
              f"{relaxed['schedules_per_s']}/s", file=sys.stderr)
    peer_url = prepared(_fresh(kind, server_url, home))
    peer = _load(_direct, [peer_url], tenant="default", **load)
    single = commit_latency(peer_url)
    print(f"{kind} single-schedule commits: {single}", file=sys.stderr)
    print(f"{kind} peer (direct store.create): {peer}", file=sys.stderr)
    out.update({
        "schedules_per_s": tocsin["schedules_per_s"],
        "latency_p50_ms": tocsin["latency_p50_ms"],
        "latency_p99_ms": tocsin["latency_p99_ms"],
        "http": tocsin, "peer_direct_store_create": peer,
        "ratio_vs_peer": round(tocsin["schedules_per_s"] / peer["schedules_per_s"], 2),
        "durability": {"strict": strict, "relaxed": relaxed, "single_commits": single,
                       "relaxed_over_strict": round(relaxed["schedules_per_s"]
                                                    / strict["schedules_per_s"], 2)},
        "target_schedules_per_s": 20_000, "machine": machine_info(),
    })
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"ingest-{kind}.json").write_text(json.dumps(out, indent=2) + "\n")
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--requests", type=int, default=25)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--small-batch", type=int, default=10)
    parser.add_argument("--small-requests", type=int, default=200)
    parser.add_argument("--postgres-url", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL"))
    args = parser.parse_args()
    for kind in args.stores.split(","):
        if kind == "postgres" and not args.postgres_url:
            with throwaway_server() as server:
                result = run_store(kind, server.url, args)
        else:
            result = run_store(kind, args.postgres_url, args)
        print(json.dumps({k: result[k] for k in ("store", "schedules_per_s", "latency_p50_ms",
                                                 "latency_p99_ms", "ratio_vs_peer")}))


if __name__ == "__main__":
    main()

"""Webhook lateness and API creates on each store, side by side in one run: SQLite, then
PostgreSQL 15 in a throw-away cluster this benchmark starts on loopback.

    bench/run lateness [--rates 200,1000,5000] [--seconds 20] [--creates 50000]
                       [--stores sqlite,postgres]

Per store: a real ``tocsin up`` over a fresh store, one webhook receiver (nginx,
``bench/receiver.py``); a warm-up, then for each rate ``rate x --seconds`` webhooks due evenly
over ``--seconds`` (created ahead of time by the store's bulk create), lateness = arrival in
nginx's access log - due time; then ``--creates`` schedules (due in a day) created by one client
posting batches of 1 000 to ``POST /v1/schedules``, and the same by two clients at once
(``<store>_creates_per_s_2_clients``: one API process) and by two clients each posting to
its own API replica (``<store>_creates_per_s_2_apis``: a second ``tocsin api`` process).

The PostgreSQL cluster has ``pg_stat_statements`` and ``auto_explain`` (statements over
``--explain-ms``) loaded; per phase the benchmark records the statements that took the server's
time (calls, total and mean ms, rows) and the server's CPU, so a regression says where it went.
Writes ``bench/results/lateness.json``: ``<store>_p50_ms_<rate>``, ``<store>_p99_ms_<rate>``,
``<store>_creates_per_s``, the targets of issue 38 and the details.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import (
    REPO,
    CpuMeter,
    cpu_between,
    free_port,
    lateness_summary,
    now_ms,
    run_phase,
    stop_group,
    write_results,
)
from bench.dispatch import _code_version, _met
from bench.services import wait_until
from tocsin.clock import iso_ms

__all__ = ["PG_SETTINGS", "main"]

RESULTS = REPO / "bench" / "results" / "lateness.json"
PG_SCRIPT = REPO / ".ci" / "postgres.sh"
PG_SETTINGS = ("-c shared_preload_libraries=pg_stat_statements,auto_explain "
               "-c pg_stat_statements.track=all -c auto_explain.log_min_duration={explain_ms} "
               "-c auto_explain.log_analyze=on -c auto_explain.log_buffers=on "
               "-c auto_explain.log_nested_statements=on -c track_io_timing=on")
"""What the benchmark's cluster adds to PostgreSQL's defaults: only the views that say where
the time goes (the server's durability and memory settings stay the defaults)."""
TOP_STATEMENTS = 12
LIMITS_MS = {200: 50, 1000: 150, 5000: 500}
"""Issue 38's bounds on PostgreSQL's p99 at each rate (and at most 1.5x SQLite's)."""


def log(message: str) -> None:
    print(f"[lateness {datetime.now(UTC):%H:%M:%S}] {message}", flush=True)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run lateness", description=__doc__.split("\n\n")[0])
    p.add_argument("--rates", default="200,1000,5000", help="webhooks due a second, per phase")
    p.add_argument("--seconds", type=float, default=20.0, help="each phase's window")
    p.add_argument("--creates", type=int, default=50_000, help="schedules created over HTTP")
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--wait-s", type=float, default=120.0,
                   help="wait at most this after a phase's last due time")
    p.add_argument("--explain-ms", type=int, default=200,
                   help="auto_explain logs the plans of statements slower than this")
    p.add_argument("--env", action="append", default=[],
                   help="NAME=VALUE for tocsin up (repeatable), e.g. a pool size")
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--keep", action="store_true",
                   help="keep each store's home (its logs) after the run; the path is printed")
    a = p.parse_args(argv)
    a.rate_list = [int(r) for r in a.rates.split(",") if r]
    return a


@contextmanager
def postgres_cluster(explain_ms: int) -> Iterator[tuple[str, Path]]:
    """A fresh PostgreSQL cluster (``.ci/postgres.sh``) with the statistics views loaded: its
    URL and directory; stopped and removed afterwards."""
    env = {**os.environ, "TOCSIN_PG_DIR": "", "TOCSIN_PG_PORT": "",
           "TOCSIN_PG_SETTINGS": PG_SETTINGS.format(explain_ms=explain_ms)}
    out = subprocess.run(["bash", str(PG_SCRIPT), "start"], env=env, capture_output=True,
                         text=True, check=True).stdout
    found = dict(line.removeprefix("export ").split("=", 1) for line in out.splitlines()
                 if line.startswith("export "))
    url, directory = found["TOCSIN_TEST_POSTGRES_URL"], Path(found["TOCSIN_PG_DIR"])
    try:
        import psycopg

        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        yield url, directory
    finally:
        subprocess.run(["bash", str(PG_SCRIPT), "stop", str(directory)], capture_output=True,
                       check=False)


class ServerViews:
    """The PostgreSQL server's own account of a phase: ``pg_stat_statements`` reset before,
    read after; the server's CPU from /proc (every process of the cluster)."""

    def __init__(self, url: str, directory: Path) -> None:
        self.url, self.directory = url, directory
        self._cpu0 = 0.0

    def _cpu_s(self) -> float:
        pid = int((self.directory / "data" / "postmaster.pid").read_text().split()[0])
        ticks = 0
        for proc in Path("/proc").iterdir():
            if not proc.name.isdigit():
                continue
            try:
                stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(proc.name) == pid or int(stat[1]) == pid:
                ticks += int(stat[11]) + int(stat[12])
        return ticks / os.sysconf("SC_CLK_TCK")

    def reset(self) -> None:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("SELECT pg_stat_statements_reset()")
        self._cpu0 = self._cpu_s()

    def read(self, wall_s: float) -> dict[str, Any]:
        import psycopg

        with psycopg.connect(self.url, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT calls, round(total_exec_time::numeric, 1), "
                "round(mean_exec_time::numeric, 3), round(max_exec_time::numeric, 1), rows, "
                "shared_blks_hit + shared_blks_read, left(regexp_replace(query, '\\s+', ' ', "
                "'g'), 300) FROM pg_stat_statements ORDER BY total_exec_time DESC "
                f"LIMIT {TOP_STATEMENTS}").fetchall()
            total = conn.execute("SELECT sum(calls), round(sum(total_exec_time)::numeric, 1) "
                                 "FROM pg_stat_statements").fetchone() or (0, 0)
            wal = conn.execute("SELECT wal_records, wal_fpi, wal_bytes, wal_sync "
                               "FROM pg_stat_wal").fetchone()
        cpu = self._cpu_s() - self._cpu0
        return {"server_cpu_s": round(cpu, 2),
                "server_cpu_pct_of_one_core": round(100 * cpu / max(wall_s, 0.001), 1),
                "statements": int(total[0] or 0), "exec_ms": float(total[1] or 0),
                "wal": dict(zip(("records", "fpi", "bytes", "syncs"), map(int, wal),
                                strict=True)) if wal else None,
                "top": [{"calls": r[0], "total_ms": float(r[1]), "mean_ms": float(r[2]),
                         "max_ms": float(r[3]), "rows": r[4], "blocks": r[5], "query": r[6]}
                        for r in rows]}


def second_api(up: Any) -> tuple[subprocess.Popen[bytes], str]:
    """Another API replica (``tocsin api``) over ``up``'s store, on a free port: its process
    and URL."""
    port = free_port()
    with (up.home / "api-2.log").open("ab") as sink:
        proc = subprocess.Popen([sys.executable, "-m", "tocsin", "api"], cwd=REPO,
                                env={**up.env, "TOCSIN_API_PORT": str(port)}, stdout=sink,
                                stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: httpx.get(url + "/healthz", timeout=2).status_code == 200, proc,
               "tocsin api (the second replica)", 120)
    return proc, url


def creates(apis: list[str], headers: dict[str, str], channel: str, n: int,
            clients: int) -> dict[str, Any]:
    """``n`` schedules due in a day, ``clients`` clients each posting batches of 1 000 in
    turn, client ``i`` to ``apis[i % len(apis)]``: schedules a second over the whole run."""
    due = iso_ms(now_ms() + 86_400_000)
    body = json.dumps({"schedules": [{"channel": channel, "payload": {"n": k},
                                      "due_at": due} for k in range(1_000)]})
    per_client = n // clients // 1_000
    errors: list[str] = []

    def client(api: str) -> None:
        with httpx.Client(base_url=api, timeout=120, headers=headers) as http:
            for _ in range(per_client):
                r = http.post("/v1/schedules", content=body,
                              headers={"Content-Type": "application/json"})
                if r.is_error:
                    errors.append(f"HTTP {r.status_code} {r.text[:200]}")
                    return

    for api in apis:  # warm
        with httpx.Client(base_url=api, timeout=120, headers=headers) as http:
            http.post("/v1/schedules", content=body,
                      headers={"Content-Type": "application/json"})
    threads = [threading.Thread(target=client, args=(apis[i % len(apis)],))
               for i in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    took = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"creating schedules: {errors[0]}")
    made = per_client * clients * 1_000
    log(f"creates, {clients} client(s), {len(set(apis))} API process(es): {made} in "
        f"{took:.1f}s ({made / took:,.0f}/s)")
    return {"schedules": made, "clients": clients, "apis": len(set(apis)),
            "seconds": round(took, 2),
            "per_s": round(made / took, 1)}


def stages(store: Any, channel: str, n: int) -> dict[str, Any]:
    """Where the lateness went, from the store: due -> claimed (the claim's lateness), and
    claimed -> acknowledged (the lane's queue, the send, the acknowledgement)."""
    rows = [s for s in store.list_schedules(channel=channel, limit=n) if s.claimed_ms]
    return {"claim": lateness_summary([s.claimed_ms - s.due_ms for s in rows]),
            "acknowledged": lateness_summary([s.delivered_ms - s.claimed_ms for s in rows
                                              if s.delivered_ms])}


def one_store(kind: str, args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    """Every phase on one store."""
    from bench.receiver import Receiver
    from bench.tocsin_up import TocsinUp, UpTarget
    from tocsin.stores import open_store

    home = tmp / kind
    home.mkdir()
    with ExitStack() as stack:
        views: ServerViews | None = None
        url = None
        if kind == "postgres":
            url, directory = stack.enter_context(postgres_cluster(args.explain_ms))
            views = ServerViews(url, directory)
        receiver = Receiver(home).start()
        stack.callback(receiver.stop)
        env = {"TOCSIN_WEBHOOK_ALLOW": "127.0.0.1/32",
               **dict(e.split("=", 1) for e in args.env)}
        up = TocsinUp(home, store_url=url, env=env, log=log)
        stack.callback(up.stop)
        out: dict[str, Any] = {"ready_s": round(up.start(), 1)}
        store = open_store(up.store_url)
        stack.callback(store.close)
        target = UpTarget(up, store, home, receiver,
                          lambda phase: ("webhook", {"url": f"{receiver.url}/{phase}"}))
        target.by_receiver = True
        out["warmup"] = run_phase(target, "warmup", n=2_000, window_ms=2_000, wait_s=300,
                                  ingest_rate_hint=None, margin_ms=2_000, log=log)
        for rate in args.rate_list:
            n = int(rate * args.seconds)
            if views:
                views.reset()
            started = time.perf_counter()
            phase = run_phase(target, f"r{rate}", n=n, window_ms=int(args.seconds * 1000),
                              wait_s=args.wait_s, ingest_rate_hint=15_000.0, log=log)
            if views:
                phase["server"] = views.read(time.perf_counter() - started)
            phase["stages"] = stages(store, f"bench-r{rate}", n)
            out[f"r{rate}"] = phase
            time.sleep(2)
        channel = target.register("creates")
        meter = CpuMeter(interval_s=1.0)
        replica, api_2 = second_api(up)
        stack.callback(stop_group, replica)
        for name, apis in (("creates_1", [up.api]), ("creates_2", [up.api, up.api]),
                           ("creates_2_apis", [up.api, api_2])):
            if views:
                views.reset()
            cpu0 = meter.read()
            got = creates(apis, up.auth_headers(), channel, args.creates, len(apis))
            got["cpu_s"] = cpu_between(cpu0, meter.read())
            if views:
                got["server"] = views.read(got["seconds"])
            out[name] = got
        meter.close()
        if views:
            plans = directory / "server.log"
            out["slow_plans_logged"] = plans.read_text(errors="replace").count(
                "duration:") if plans.exists() else 0
        return out


def report(args: argparse.Namespace, argv: list[str] | None,
           stores: dict[str, dict[str, Any]], started: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, got in stores.items():
        for rate in args.rate_list:
            lat = (got.get(f"r{rate}") or {}).get("lateness_ms") or {}
            out[f"{kind}_p50_ms_{rate}"] = lat.get("p50")
            out[f"{kind}_p99_ms_{rate}"] = lat.get("p99")
            out[f"{kind}_delivered_{rate}"] = (got.get(f"r{rate}") or {}).get("delivered")
        out[f"{kind}_creates_per_s"] = (got.get("creates_1") or {}).get("per_s")
        out[f"{kind}_creates_per_s_2_clients"] = (got.get("creates_2") or {}).get("per_s")
        out[f"{kind}_creates_per_s_2_apis"] = (got.get("creates_2_apis") or {}).get("per_s")
    targets: dict[str, Any] = {}
    if "sqlite" in stores and "postgres" in stores:
        for rate in args.rate_list:
            pg, lite = out[f"postgres_p99_ms_{rate}"], out[f"sqlite_p99_ms_{rate}"]
            if rate in LIMITS_MS:
                targets[f"postgres p99 at {rate}/s <= {LIMITS_MS[rate]} ms"] = _met(
                    pg, LIMITS_MS[rate], at_most=True)
            targets[f"postgres p99 at {rate}/s <= 1.5x sqlite's"] = _met(
                round(pg / max(lite, 1), 2) if pg is not None and lite is not None else None,
                1.5, at_most=True)
        pg_c, lite_c = out["postgres_creates_per_s"], out["sqlite_creates_per_s"]
        out["creates_postgres_vs_sqlite"] = round(pg_c / lite_c, 2) if pg_c and lite_c else None
        targets["postgres creates >= 0.8x sqlite's"] = _met(out["creates_postgres_vs_sqlite"],
                                                            0.8, at_most=False)
    out["targets"] = targets
    out["command"] = "bench/run lateness " + " ".join(argv or [])
    out["code"] = _code_version()
    out["run_at"] = datetime.fromtimestamp(started / 1000, UTC).isoformat(timespec="seconds")
    out["wall_s"] = round((now_ms() - started) / 1000, 1)
    out["details"] = stores
    return out


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    args = _args(argv)
    started = now_ms()
    stores: dict[str, dict[str, Any]] = {}
    tmp = Path(tempfile.mkdtemp(prefix="tocsin-bench-lateness-"))
    try:
        for kind in args.stores.split(","):
            log(f"{kind}: starting")
            try:
                stores[kind] = one_store(kind, args, tmp)
            except Exception as exc:  # the other store still runs; the report says which failed
                log(f"{kind}: failed: {exc!r} (logs in {tmp / kind})")
                stores[kind] = {"failed": repr(exc)}
    finally:
        if args.keep or any("failed" in s for s in stores.values()):
            log(f"homes kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    doc = report(args, argv, stores, started)
    write_results(doc, args.out)
    print(json.dumps({k: v for k, v in doc.items() if k not in ("details", "machine")},
                     indent=1))


if __name__ == "__main__":
    main()

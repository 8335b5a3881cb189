"""Which HTTP client carries the webhook channel: httpx (async), aiohttp, and the threaded
httpx client the channel used before, POSTing the same envelope-sized body to a local nginx
that answers ``return 200``; then the webhook channel itself (aiohttp, signing each request)
sending the same number of envelopes in batches of 5 000, as one Spark task would.

    python -m bench.webhook_clients [--requests 20000] [--concurrency 64] [--rounds 3]

The clients run round-robin in one run (one round = each client once), so a busy machine
slows them alike and the ratios hold; the table gives each client's median round. nginx runs
from its own config file on 127.0.0.1 and a free port (not the system service).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import signal
import socket
import statistics
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from bench.common import free_port

BODY = json.dumps({"v": 1, "schedule_id": "0" * 26, "delivery_id": "0" * 26 + "-1",
                   "attempt": 1, "tenant": "default", "channel": "bench",
                   "due_at": "2026-01-01T00:00:00.000Z", "key": None, "ordering_key": None,
                   "headers": {}, "payload": {"n": 1, "text": "x" * 64}}).encode()
HEADERS = {"Content-Type": "application/json", "webhook-id": "0" * 26 + "-1",
           "webhook-timestamp": "1767225600", "webhook-signature": "v1," + "A" * 44}

NGINX_CONF = """
daemon off; worker_processes 1; pid {dir}/nginx.pid; error_log {dir}/error.log warn;
events {{ worker_connections 4096; }}
http {{
  access_log off; client_body_temp_path {dir}/body; proxy_temp_path {dir}/proxy;
  fastcgi_temp_path {dir}/fcgi; uwsgi_temp_path {dir}/uwsgi; scgi_temp_path {dir}/scgi;
  keepalive_requests 1000000; keepalive_timeout 60s;
  server {{ listen 127.0.0.1:{port}; location / {{ return 200 "ok"; }} }}
}}
"""


def start_nginx() -> tuple[subprocess.Popen[bytes], str, str]:
    """nginx on a free loopback port; returns (process, url, its directory)."""
    directory = tempfile.mkdtemp(prefix="tocsin-nginx-")
    port = free_port()
    conf = Path(directory) / "nginx.conf"
    conf.write_text(NGINX_CONF.format(dir=directory, port=port))
    proc = subprocess.Popen([shutil.which("nginx") or "/usr/sbin/nginx", "-c", str(conf),
                             "-p", directory], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc, f"http://127.0.0.1:{port}/in", directory
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise RuntimeError(f"nginx did not start; see {directory}/error.log")


Post = Callable[[], Awaitable[None]]


ERRORS: dict[str, int] = {}


async def drive(post: Post, n: int, concurrency: int) -> list[float]:
    """``n`` POSTs, ``concurrency`` at a time; each answered one's latency in seconds (the
    failures are counted in :data:`ERRORS` by exception name)."""
    latencies: list[float] = []
    left = iter(range(n))

    async def worker() -> None:
        for _ in left:
            t0 = time.perf_counter()
            try:
                await post()
            except Exception as exc:
                ERRORS[type(exc).__name__] = ERRORS.get(type(exc).__name__, 0) + 1
                continue
            latencies.append(time.perf_counter() - t0)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return latencies


async def run_httpx(url: str, n: int, c: int) -> list[float]:
    import httpx

    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    async with httpx.AsyncClient(limits=limits, timeout=10) as client:
        async def post() -> None:
            r = await client.post(url, content=BODY, headers=HEADERS)
            assert r.status_code == 200
        return await drive(post, n, c)


async def run_aiohttp(url: str, n: int, c: int) -> list[float]:
    import aiohttp

    connector = aiohttp.TCPConnector(limit=c, limit_per_host=c)
    async with aiohttp.ClientSession(connector=connector) as session:
        async def post() -> None:
            async with session.post(url, data=BODY, headers=HEADERS) as r:
                await r.read()
                assert r.status == 200
        return await drive(post, n, c)


async def run_httpx_threads(url: str, n: int, c: int) -> list[float]:
    import httpx

    limits = httpx.Limits(max_connections=c, max_keepalive_connections=c)
    client = httpx.Client(limits=limits, timeout=10)
    pool = ThreadPoolExecutor(max_workers=c)
    loop = asyncio.get_running_loop()

    def blocking() -> None:
        assert client.post(url, content=BODY, headers=HEADERS).status_code == 200

    async def post() -> None:
        await loop.run_in_executor(pool, blocking)
    try:
        return await drive(post, n, c)
    finally:
        pool.shutdown()
        client.close()


CLIENTS = {"aiohttp": run_aiohttp, "httpx async": run_httpx, "httpx threads (before)":
           run_httpx_threads}
CHANNEL = "WebhookChannel (aiohttp, signed)"


def run_channel(url: str, n: int, c: int) -> dict[str, float]:
    """The webhook channel's own rate: ``n`` envelopes, signed, in batches of 5 000."""
    from tocsin.channels.policy import DestinationPolicy
    from tocsin.channels.webhook import WebhookChannel
    from tocsin.domain import ChannelKind, ChannelSpec, Envelope, PayloadKind

    secret = "whsec_" + "QUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUE="
    spec = ChannelSpec(name="bench", kind=ChannelKind.WEBHOOK,
                       config={"url": url, "secret": secret, "concurrency": c})
    policy = DestinationPolicy.build(file_roots=["/nonexistent"], webhook_allow=["127.0.0.1"])
    channel = WebhookChannel(spec, policy=policy)
    envelopes = [Envelope(schedule_id=f"S{i:020d}", delivery_id=f"S{i:020d}-1", attempt=1,
                          epoch=1, tenant="default", channel="bench",
                          payload=b'{"n":%d,"text":"%s"}' % (i, b"x" * 64),
                          payload_kind=PayloadKind.JSON, due_ms=1_767_225_600_000)
                 for i in range(n)]
    channel.send(envelopes[:200])  # connections up
    cpu0, t0 = time.process_time(), time.perf_counter()
    delivered = 0
    for start in range(0, n, 5000):
        delivered += sum(r.error is None for r in channel.send(envelopes[start:start + 5000]))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    channel.close()
    return {"per_s": delivered / wall, "failed": n - delivered, "p50_ms": float("nan"),
            "p99_ms": float("nan"), "cpu_ms_per_1000": cpu / n * 1e6, "cpu_of_wall": cpu / wall}


def measure(name: str, url: str, n: int, c: int) -> dict[str, float]:
    """One client's round: requests/s, p50/p99 ms per request, CPU seconds per 1 000."""
    if name == CHANNEL:
        return run_channel(url, n, c)
    cpu0, t0 = time.process_time(), time.perf_counter()
    latencies = asyncio.run(CLIENTS[name](url, n, c))
    wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    q = statistics.quantiles(latencies, n=100)
    return {"per_s": len(latencies) / wall, "failed": n - len(latencies),
            "p50_ms": q[49] * 1000, "p99_ms": q[98] * 1000,
            "cpu_ms_per_1000": cpu / n * 1e6, "cpu_of_wall": cpu / wall}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    nginx, url, directory = start_nginx()
    names = [*CLIENTS, CHANNEL]
    rounds: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    try:
        for name in names:  # warm-up: imports, first connections
            measure(name, url, 500, args.concurrency)
        for _ in range(args.rounds):
            for name in names:
                rounds[name].append(measure(name, url, args.requests, args.concurrency))
    finally:
        nginx.send_signal(signal.SIGQUIT)
        nginx.wait(10)
        shutil.rmtree(directory, ignore_errors=True)
    best = max(statistics.median(r["per_s"] for r in rounds[n]) for n in names)
    print(f"{args.requests} POSTs x {args.rounds} rounds, concurrency {args.concurrency}, "
          f"load average {os.getloadavg()[0]:.1f}")
    print("| client | requests/s | vs best | p50 ms | p99 ms | CPU ms / 1 000 | CPU of wall "
          "| failed |")
    print("|---|---|---|---|---|---|---|---|")
    for name, runs in rounds.items():
        med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        p50, p99 = (("—", "—") if math.isnan(med["p50_ms"]) else
                    (f"{med['p50_ms']:.1f}", f"{med['p99_ms']:.1f}"))
        print(f"| {name} | {med['per_s']:,.0f} | {med['per_s'] / best:.2f} | "
              f"{p50} | {p99} | {med['cpu_ms_per_1000']:.0f} | "
              f"{med['cpu_of_wall']:.0%} | {sum(r['failed'] for r in runs):.0f} |")
    if ERRORS:
        print(f"failures by kind: {ERRORS}")


if __name__ == "__main__":
    main()

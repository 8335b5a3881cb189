"""Chaos: the production layout on one machine, faults injected while it works.

PostgreSQL (a cluster of the test's own, so it can be crashed), two ``tocsin api`` replicas,
client threads creating schedules through them, the dispatcher as ``tocsin dispatcher`` on
``local-cluster[2,4,1024]`` (separate executor JVMs), a webhook receiver recording every
delivery. While the schedules come due, over 60 s:

* 20 s in, while clients create: ``kill -9`` of an API replica (they go on through the other);
* 10 % delivered: ``kill -9`` of one executor JVM;
* 30 % delivered: ``pg_ctl stop -m immediate`` of PostgreSQL, started again 5 s later;
* 55 % delivered: ``kill -9`` of the driver and everything under it; the dispatcher is started
  again.

The test acts as the supervisor a deployment has (systemd, Kubernetes): a dispatcher that exits
is started again. Afterwards it checks the receiver's records, not the store's statuses: every
schedule the API accepted arrived; a schedule arrived more than once only under the same
delivery id, or under a later attempt's id when the store logged the earlier attempt as failed.
Counts are printed. ``TOCSIN_CHAOS_SCHEDULES`` sets the load (default 100 000).
"""

from __future__ import annotations

import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from tocsin.apikeys.tokens import issue_key
from tocsin.domain import ChannelKind, ChannelSpec, Outcome, Role
from tocsin.stores import open_store
from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import wait_until
from tocsin.testing.postgres import PostgresServer
from tocsin.testing.processes import executor_jvms, kill_tree, start_tocsin
from tocsin.testing.receiver import Receiver

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = int(os.environ.get("TOCSIN_CHAOS_SCHEDULES", "100000"))
SPREAD_S = 60
BATCH = 500
CLIENTS = 4


class Clients:
    """Threads creating ``N`` schedules in batches, due over ``SPREAD_S`` seconds from ``t0``.
    A batch whose answer is lost (a replica killed, the store down) is sent again, with the
    same keys, to the next replica until it is answered: keys make the retry safe."""

    def __init__(self, urls: list[str], t0: float, api_key: str) -> None:
        self.urls = urls
        self.t0 = t0
        self.headers = {"authorization": f"Bearer {api_key}"}
        self.accepted: dict[str, str] = {}
        self.retries = Counter[str]()
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self._run, args=(c,), daemon=True)
                        for c in range(CLIENTS)]

    def start(self) -> Clients:
        for t in self.threads:
            t.start()
        return self

    def join(self, timeout_s: float) -> None:
        for t in self.threads:
            t.join(timeout_s)
            assert not t.is_alive(), "a client did not finish"

    def _run(self, client: int) -> None:
        batches = range(client, N // BATCH, CLIENTS)
        with httpx.Client(timeout=30, headers=self.headers) as http:
            replica = client
            for b in batches:
                first = b * BATCH
                # Create each batch ~5 s before its schedules come due, as real clients would.
                lead = self.t0 + first * SPREAD_S / N - 5 - time.time()
                if lead > 0:
                    time.sleep(lead)
                body = {"schedules": [
                    {"channel": "hook", "payload": {"n": i}, "key": f"chaos-{i}",
                     "due_at": _iso(self.t0 + i * SPREAD_S / N)}
                    for i in range(first, first + BATCH)]}
                while True:
                    url = self.urls[replica % len(self.urls)]
                    try:
                        r = http.post(f"{url}/v1/schedules", json=body)
                        if r.status_code in (200, 201):
                            with self.lock:
                                for item, made in zip(body["schedules"], r.json()["schedules"],
                                                      strict=True):
                                    self.accepted[item["key"]] = made["id"]
                            break
                        if r.status_code == 422:  # due too far in the past after an outage
                            raise AssertionError(r.text)
                        reason = str(r.status_code)
                    except httpx.TransportError as exc:
                        reason = type(exc).__name__
                    with self.lock:
                        self.retries[reason] += 1
                    replica += 1
                    time.sleep(0.2 + random.random() * 0.3)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"


def test_nothing_is_lost_through_crashes(tmp_path: Path, say: Callable[[str], None]) -> None:
    # its own cluster (crashed below), where the postgres user can reach it
    pg = PostgresServer(Path(tempfile.mkdtemp(prefix="tocsin-pg.")))
    try:
        _chaos(pg, tmp_path, say)
    finally:
        pg.remove()


def _chaos(pg: PostgresServer, tmp_path: Path, say: Callable[[str], None]) -> None:
    url = pg.start()
    store = open_store(url, buckets=32)
    _, api_key = issue_key(store, role=Role.ADMIN, now_ms=0)
    receiver = Receiver().start()
    store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                                  config={"url": receiver.url + "/in", "concurrency": 32,
                                          "timeout": 30}))
    # the grace lets a batch held up by the outage still be accepted when the store is back
    base = {"TOCSIN_STORE": url, "TOCSIN_BUCKETS": "32", "TOCSIN_GRACE_SECONDS": "600"}
    dispatcher_env = {**base, "TOCSIN_SPARK_MASTER": "local-cluster[2,4,1024]",
                      "TOCSIN_CHECKPOINT": str(tmp_path / "ck"), "TOCSIN_PARTITIONS": "4",
                      "TOCSIN_TRIGGER_SECONDS": "0.5", "TOCSIN_LEASE_SECONDS": "20",
                      "TOCSIN_BATCH_CAP": "20000"}
    apis: list[Any] = []
    urls = []
    for i in range(2):
        port = free_port()
        apis.append(start_tocsin("api", env={**base, "TOCSIN_API_PORT": str(port)},
                                 log=tmp_path / f"api-{i}.log"))
        urls.append(f"http://127.0.0.1:{port}")
    dispatcher = [start_tocsin("dispatcher", env=dispatcher_env, log=tmp_path / "disp.log")]
    restarts = Counter[str]()
    stop = threading.Event()

    def supervise() -> None:  # what systemd does for a real deployment
        while not stop.is_set():
            if dispatcher[0].poll() is not None:
                restarts["dispatcher exited"] += 1
                dispatcher[0] = start_tocsin("dispatcher", env=dispatcher_env,
                                             log=tmp_path / "disp.log")
            time.sleep(0.5)

    supervisor = threading.Thread(target=supervise, daemon=True)
    faults: dict[str, int] = {}
    try:
        for u in urls:
            wait_until(lambda u=u: _healthy(u), timeout_s=60, what=f"API {u}")
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=180,
                   what="the dispatcher to start")
        supervisor.start()
        t0 = time.time() + 10
        clients = Clients(urls, t0, api_key).start()

        def at(offset_s: float) -> None:
            time.sleep(max(0.0, t0 + offset_s - time.time()))

        def delivered(share: float) -> None:
            wait_until(lambda: len(receiver.received()) >= share * N, timeout_s=400,
                       interval_s=0.5, what=f"{share:.0%} delivered")

        at(20)  # clients are still creating (until ~55 s)
        kill_tree(apis[0])
        faults["API replica killed, delivered so far"] = len(receiver.received())
        delivered(0.10)
        jvms = executor_jvms(dispatcher[0].pid)
        assert jvms, "no executor JVM to kill"
        os.kill(jvms[0], signal.SIGKILL)
        faults["executor killed, delivered so far"] = len(receiver.received())
        delivered(0.30)
        pg.crash()
        faults["PostgreSQL stopped -m immediate, delivered so far"] = len(receiver.received())
        time.sleep(5)
        pg.start()
        delivered(0.55)
        restarts["driver killed"] += 1
        victim = dispatcher[0]
        kill_tree(victim)  # the supervisor starts it again
        faults["driver killed, delivered so far"] = len(receiver.received())
        clients.join(timeout_s=300)
        wait_until(lambda: {r.headers["tocsin-schedule-id"] for r in receiver.received()}
                   >= set(clients.accepted.values()), timeout_s=600, interval_s=2,
                   what="every accepted schedule at the receiver")
    finally:
        stop.set()
        if supervisor.is_alive():
            supervisor.join(timeout=5)
        for proc in [*apis, dispatcher[0]]:
            kill_tree(proc)
        receiver.stop()

    records = receiver.received()
    accepted = set(clients.accepted.values())
    by_schedule: dict[str, list[str]] = defaultdict(list)
    for r in records:
        by_schedule[r.headers["tocsin-schedule-id"]].append(r.headers["tocsin-delivery-id"])
    assert len(clients.accepted) == N
    assert accepted <= set(by_schedule), "an accepted schedule was never delivered"
    assert set(by_schedule) <= accepted, "a delivery of a schedule nobody created"
    repeats = sum(len(ids) - 1 for ids in by_schedule.values())
    new_attempts = 0
    for sid, ids in by_schedule.items():
        distinct = sorted(set(ids), key=lambda d: int(d.rsplit("-", 1)[1]))
        if len(distinct) > 1:  # a later attempt: every earlier one must be logged as failed
            failed = {d.delivery_id for d in store.deliveries(sid)
                      if d.outcome is not Outcome.DELIVERED}
            assert set(distinct[:-1]) <= failed, (sid, distinct, failed)
            new_attempts += len(distinct) - 1
    store.close()
    say(f"accepted {len(accepted)}, deliveries {len(records)}, repeats {repeats} "
          f"(same delivery id: {repeats - new_attempts}, later attempt after a logged "
          f"failure: {new_attempts}); client retries {dict(clients.retries)}; "
          f"dispatcher restarts {dict(restarts)}; {faults}")


def _healthy(url: str) -> bool:
    try:
        return httpx.get(url + "/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False

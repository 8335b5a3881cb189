"""Bulkheads, measured: a victim tenant's steady webhook stream beside one neighbour at a time.

``tocsin up`` (API + Spark dispatcher) runs over a fresh store. The victim sends ``--rate``
webhooks a second for ``--seconds`` to a healthy receiver (tocsin.testing's recording HTTP
server); the neighbour tenant, in the same store and dispatcher, is in turn:

* ``alone``: no neighbour (the baseline);
* ``slow``: a webhook endpoint that answers after 8 s, 10 schedules a second;
* ``tarpit``: a slow-loris endpoint (a header line every 2 s, for ever), 10 a second;
* ``volume``: 100 000 schedules of its own all due at one instant (file channel), whose drain
  rate is compared with the same burst with no victim (``volume_alone``).

Writes ``bench/results/isolation.json``: ``victim_p99_ms_<run>``, ``victim_received_ratio``
(the worst run), the neighbour's own throughput in each run, and every run's lateness summary::

    bench/run isolation [--store sqlite|postgres] [--rate 100] [--seconds 20] [--burst 100000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

from bench.common import REPO, lateness_summary, now_ms, write_results
from bench.tocsin_up import TocsinUp
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores import open_store
from tocsin.testing.receiver import Receiver
from tocsin.testing.tarpit import Tarpit

RESULTS = REPO / "bench" / "results" / "isolation.json"
"""SQLite's run (the embedded default); PostgreSQL's goes beside it, ``isolation-postgres.json``."""
LEAD_MS = 3_000
CREATE_US = 80
"""A generous time to write one of the neighbour's rows, added to the lead."""


def _due(text: str) -> int:
    return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run isolation", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default="sqlite", help="sqlite (default) or a postgresql:// URL")
    p.add_argument("--rate", type=int, default=100, help="victim webhooks a second")
    p.add_argument("--seconds", type=int, default=20, help="how long the victim sends")
    p.add_argument("--burst", type=int, default=100_000, help="the volume neighbour's burst")
    p.add_argument("--only", default="alone,slow,tarpit,volume,volume_alone")
    return p.parse_args(argv)


class Run:
    """One ``tocsin up`` and the victim's receiver, shared by every run."""

    def __init__(self, args: argparse.Namespace, home: Path) -> None:
        url = None if args.store == "sqlite" else args.store
        self.up = TocsinUp(home, store_url=url, env={"TOCSIN_BUCKETS": "64"}, log=print)
        self.args = args
        self.victim = Receiver().start()
        self.store: Any = None

    def start(self) -> float:
        ready = self.up.start()
        self.store = open_store(self.up.store_url, buckets=64)
        return ready

    def once(self, name: str, neighbour: ChannelSpec | None, neighbour_n: int,
             neighbour_spread_ms: int, *, victim: bool = True) -> dict[str, Any]:
        args, store = self.args, self.store
        tag = uuid.uuid4().hex[:8]
        self.victim.reset()
        n = args.rate * args.seconds if victim else 0
        # every row exists before the first is due: writing 100 000 took 3.8 s under load, and
        # a victim's rows written after their due time read as the dispatcher's lateness
        start = now_ms() + LEAD_MS + neighbour_n * CREATE_US // 1000
        if neighbour is not None:
            store.put_channel(neighbour)
            for off in range(0, neighbour_n, 10_000):
                store.create([NewSchedule(channel=neighbour.name, tenant=neighbour.tenant,
                                          payload=b"{}",
                                          due_ms=start + 500 + (off + i) * neighbour_spread_ms
                                          // max(neighbour_n, 1))
                              for i in range(min(10_000, neighbour_n - off))], now_ms=now_ms())
        spec = ChannelSpec(name=f"victim-{tag}", kind=ChannelKind.WEBHOOK, tenant="victim",
                           config={"url": f"{self.victim.url}/{tag}"})
        store.put_channel(spec)
        if n:
            store.create([NewSchedule(channel=spec.name, tenant="victim", payload=b"{}",
                                      due_ms=start + i * 1000 // args.rate) for i in range(n)],
                         now_ms=now_ms())
        slack = start - now_ms()
        if slack < 500:
            print(f"[isolation] {name}: WARNING the rows were written {slack} ms before the "
                  "first was due", flush=True)
        deadline = time.monotonic() + slack / 1000 + args.seconds + 60
        got: list[Any] = []
        while time.monotonic() < deadline:
            got = [r for r in self.victim.received() if r.path == f"/{tag}"]
            if len({r.headers["tocsin-schedule-id"] for r in got}) >= n and (
                    neighbour is None or neighbour.kind is not ChannelKind.FILE
                    or (now_ms() > start + 500 and self._drained(neighbour))):
                break
            time.sleep(0.5)
        if neighbour is not None and neighbour.kind is ChannelKind.WEBHOOK:
            # the neighbour's own throughput: give its slow sends time to end (bounded)
            until = time.monotonic() + 30
            while time.monotonic() < until and not self._drained(neighbour):
                time.sleep(0.5)
        out: dict[str, Any] = {"setup_slack_ms": slack, "victim": lateness_summary(
            [r.at_ms - _due(r.headers["tocsin-due-at"]) for r in got]) if n else None,
            "victim_sent": n, "victim_received": len({r.headers["tocsin-schedule-id"]
                                                      for r in got})}
        if n:
            out["victim_stages"] = self._stages(spec, got, n)
        if neighbour is not None:
            out["neighbour"] = self._neighbour(neighbour, start + 500, neighbour_n)
        print(f"[isolation] {name}: {json.dumps(out)}", flush=True)
        return out

    def _stages(self, spec: ChannelSpec, got: list[Any], n: int) -> dict[str, Any]:
        """Where the victim's lateness went: due → claimed (the claim's), claimed → received
        (the lane's queue and the send)."""
        at = {r.headers["tocsin-schedule-id"]: r.at_ms for r in got}
        rows = [s for s in self.store.list_schedules(channel=spec.name, tenant=spec.tenant,
                                                     limit=n) if s.claimed_ms]
        return {"claim": lateness_summary([s.claimed_ms - s.due_ms for s in rows]),
                "send": lateness_summary([at[s.id] - s.claimed_ms for s in rows if s.id in at])}

    def _drained(self, spec: ChannelSpec) -> bool:
        return self.store.due_between(from_ms=0, to_ms=now_ms(), tenant=spec.tenant) == 0 and \
            sum(n for (t, c), n in self.store.claimed_by_channel(tenant=spec.tenant).items()
                if c == spec.name) == 0

    def _neighbour(self, spec: ChannelSpec, first_due: int, n: int) -> dict[str, Any]:
        rows = self.store.list_schedules(channel=spec.name, tenant=spec.tenant,
                                         status=Status.DELIVERED, limit=n)
        done = [s.delivered_ms for s in rows if s.delivered_ms]
        took = (max(done) - first_due) / 1000 if done else None
        return {"sent": n, "delivered": len(done),
                "deliveries_per_s": round(len(done) / took, 1) if took else 0.0,
                "holds": [(h.name, h.reason) for h in self.store.channel_holds(
                    tenant=spec.tenant)]}

    def stop(self) -> None:
        self.victim.stop()
        if self.store is not None:
            self.store.close()
        self.up.stop()


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    only = set(args.only.split(","))
    results: dict[str, Any] = {"args": vars(args)}
    with tempfile.TemporaryDirectory(prefix="tocsin-isolation-") as tmp:
        run = Run(args, Path(tmp))
        try:
            results["ready_s"] = round(run.start(), 1)
            run.once("warm-up", None, 0, 0)
            runs: dict[str, dict[str, Any]] = {}
            if "alone" in only:
                runs["alone"] = run.once("alone", None, 0, 0)
            if "slow" in only:
                with Receiver() as slow:
                    slow.reset(delay_s=8)
                    runs["slow"] = run.once("slow", ChannelSpec(
                        name="slow", kind=ChannelKind.WEBHOOK, tenant="neighbour",
                        config={"url": slow.url}), 10 * args.seconds, args.seconds * 1000)
                    slow.release()
            if "tarpit" in only:
                with Tarpit("drip", every_s=2) as pit:
                    runs["tarpit"] = run.once("tarpit", ChannelSpec(
                        name="tarpit", kind=ChannelKind.WEBHOOK, tenant="neighbour",
                        config={"url": pit.url}), 10 * args.seconds, args.seconds * 1000)
            for name, victim in (("volume", True), ("volume_alone", False)):
                if name in only:
                    runs[name] = run.once(name, ChannelSpec(
                        name=f"bulk-{uuid.uuid4().hex[:6]}", kind=ChannelKind.FILE,
                        tenant="neighbour", config={"path": f"{name}.jsonl"}),
                        args.burst, 0, victim=victim)
        finally:
            run.stop()
    results["runs"] = runs
    for name in ("alone", "slow", "tarpit", "volume"):
        if runs.get(name, {}).get("victim"):
            key = "alone" if name == "alone" else {"slow": "slow_neighbour",
                                                   "tarpit": "tarpit_neighbour",
                                                   "volume": "volume_neighbour"}[name]
            results[f"victim_p99_ms_{key}"] = runs[name]["victim"]["p99"]
    results["victim_received_ratio"] = min(
        (r["victim_received"] / r["victim_sent"] for r in runs.values() if r["victim_sent"]),
        default=None)
    for name in ("slow", "tarpit", "volume", "volume_alone"):
        if name in runs:
            results[f"neighbour_{name}_deliveries_per_s"] = runs[name]["neighbour"][
                "deliveries_per_s"]
    if "volume" in runs and "volume_alone" in runs and runs["volume_alone"]["neighbour"][
            "deliveries_per_s"]:
        results["volume_drain_ratio"] = round(
            runs["volume"]["neighbour"]["deliveries_per_s"]
            / runs["volume_alone"]["neighbour"]["deliveries_per_s"], 2)
    write_results(results, RESULTS if args.store == "sqlite"
                  else RESULTS.with_name("isolation-postgres.json"))
    print(json.dumps({k: v for k, v in results.items() if k.startswith(("victim", "volume"))}))


if __name__ == "__main__":
    main()

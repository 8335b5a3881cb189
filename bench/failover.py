"""Several dispatchers on one PostgreSQL store: sharing, fail-over and hand-over, measured.

A ``tocsin api`` process and ``tocsin dispatcher`` processes (all started with the same
settings, one checkpoint setting) over a fresh schema; schedules are created through the API
ahead of their due times, to webhooks on nginx (``bench/receiver.py``, whose access log is the
measurement), ``--rate`` a second for ``--seconds`` each phase:

* ``one``: one dispatcher; ``two``: a second one joined (the lateness of each, and their ratio;
  ``one_fast``/``two_fast`` the same at ``--compare-rate``, 1 000 a second);
* ``after_kill``: two, and kill -9 of one a third into the phase (the lateness of what falls
  due after the kill); a new dispatcher then takes its place;
* ``after_stop``: the same with SIGSTOP of one (its whole process group: a frozen machine),
  fenced out after the beats' timeout; SIGCONT then, and it exits; a new one takes its place;
* ``rolling_restart``: each dispatcher in turn stopped with SIGTERM (it hands its buckets over)
  and started again, while the stream goes on (the lateness over the whole phase);
* ``drain``: ``--backlog`` webhooks all due at once, drained by one dispatcher and then by two
  (``drain_ratio_two_vs_one``, rows a second from the store's delivery times).

Every phase counts what was lost (never received), repeats under a new delivery id, and how
often a dispatcher began covering for another (``covers``, from their logs; ``covers_two`` and
``covers_two_fast`` at the top: with both alive, each is a live member found late).
Writes ``bench/results/failover.json``::

    flock /work/team/bench.lock bench/run failover --store postgresql://... \
        [--rate 200] [--seconds 20] [--backlog 20000] [--compare-rate 1000]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import REPO, lateness_summary, now_ms, write_results
from bench.receiver import Receiver
from bench.services import postgres_schema
from tocsin.apikeys.tokens import issue_key
from tocsin.domain import ChannelKind, ChannelSpec, Role, Status
from tocsin.stores import open_store
from tocsin.testing.dispatch import serving_runs, wait_serving, wait_until
from tocsin.testing.processes import freeze, kill_tree, start_tocsin, thaw

RESULTS = REPO / "bench" / "results" / "failover.json"
BUCKETS = 64
LEAD_MS = 4_000
"""Schedules are all created at least this long before the first is due."""
START_S = 240


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="bench/run failover", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--store", default=os.environ.get("TOCSIN_TEST_POSTGRES_URL", ""),
                   help="a postgresql:// server URL (a fresh schema is made in it)")
    p.add_argument("--rate", type=int, default=200, help="webhooks a second")
    p.add_argument("--seconds", type=int, default=20, help="how long each phase sends")
    p.add_argument("--backlog", type=int, default=20_000, help="the drain phases' backlog")
    p.add_argument("--compare-rate", type=int, default=1000,
                   help="also compare one and two dispatchers at this rate (0: not)")
    p.add_argument("--only", default="one,two,after_kill,after_stop,rolling_restart,drain")
    return p.parse_args(argv)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")


class Bench:
    """The API, the dispatchers and the receiver of one run."""

    def __init__(self, args: argparse.Namespace, url: str, home: Path) -> None:
        self.args, self.url, self.home = args, url, home
        self.store: Any = open_store(url, buckets=BUCKETS)
        self.receiver = Receiver(home).start()
        self.env = {"TOCSIN_STORE": url, "TOCSIN_CHECKPOINT": str(home / "checkpoint"),
                    "TOCSIN_BUCKETS": str(BUCKETS), "TOCSIN_HOME": str(home),
                    "TOCSIN_LOG_FORMAT": "json"}
        self.procs: list[subprocess.Popen[bytes]] = []
        port = _free_port()
        self.api_url = f"http://127.0.0.1:{port}"
        self.api = start_tocsin("api", env={**self.env, "TOCSIN_API_PORT": str(port)},
                                log=home / "api.log")
        key = issue_key(self.store, role=Role.ADMIN, name="bench", now_ms=now_ms())[1]
        self.http = httpx.Client(base_url=self.api_url, timeout=60,
                                 headers={"authorization": f"Bearer {key}"})
        wait_until(self._api_up, timeout_s=120, what="the API")

    def _api_up(self) -> bool:
        try:
            return self.http.get("/healthz").status_code == 200
        except httpx.TransportError:
            return False

    # -- dispatchers ---------------------------------------------------------------------

    def start(self) -> subprocess.Popen[bytes]:
        proc = start_tocsin("dispatcher", env=self.env,
                            log=self.home / f"dispatcher-{len(self.procs)}.log")
        self.procs.append(proc)
        return proc

    def covers(self) -> int:
        """How many times a dispatcher began covering for another so far (its log's
        "covering for run" warnings): a live member found late by a busy peer, or a frozen
        one."""
        return sum(path.read_text(errors="replace").count("covering for run")
                   for path in self.home.glob("dispatcher-*.log"))

    def run_of(self, proc: subprocess.Popen[bytes]) -> str:
        return next(r.run for r in self.store.runs() if r.pid == proc.pid)

    def live(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in self.procs if p.poll() is None]

    def serving(self, n: int, *, timeout_s: float = START_S,
                other_than: frozenset[str] = frozenset()) -> float:
        began = time.monotonic()
        wait_serving(self.store, n, timeout_s=timeout_s, other_than=other_than)
        return time.monotonic() - began

    # -- load ----------------------------------------------------------------------------

    def channel(self, phase: str) -> str:
        self.store.put_channel(ChannelSpec(name=phase, kind=ChannelKind.WEBHOOK,
                                           config={"url": f"{self.receiver.url}/{phase}"}))
        return phase

    def create(self, channel: str, dues: list[int]) -> None:
        for i in range(0, len(dues), 1_000):
            r = self.http.post("/v1/schedules", json={"schedules": [
                {"channel": channel, "payload": {"n": i + j}, "due_at": _iso(due)}
                for j, due in enumerate(dues[i:i + 1_000])]})
            r.raise_for_status()

    def stream(self, phase: str, *, seconds: float | None = None,
               rate: int | None = None) -> tuple[int, list[int]]:
        """Create the phase's schedules (``--rate`` a second); its first due time and all."""
        seconds, rate = seconds or self.args.seconds, rate or self.args.rate
        n = int(rate * seconds)
        first = now_ms() + LEAD_MS + n // 5  # creating takes about 0.2 ms a schedule
        dues = [first + i * 1000 // rate for i in range(n)]
        self.create(self.channel(phase), dues)
        slack = first - now_ms()
        if slack < 500:
            print(f"[failover] {phase}: WARNING created {slack} ms before the first due",
                  flush=True)
        return first, dues

    def wait_phase(self, phase: str, dues: list[int]) -> None:
        deadline = time.monotonic() + (dues[-1] - now_ms()) / 1000 + 60
        while time.monotonic() < deadline:
            if len(self.receiver.outcomes(phase).done_ms) >= len(dues):
                break
            time.sleep(0.5)

    def result(self, phase: str, dues: list[int], *, after_ms: int = 0) -> dict[str, Any]:
        got = self.receiver.outcomes(phase)
        late = [done - due for due, done in zip(got.due_ms, got.done_ms, strict=True)
                if due >= after_ms]
        out = {"sent": len(dues), "received": len(got.done_ms),
               "lost": len(dues) - len(got.done_ms), "after_ms": after_ms or None,
               "measured": len(late), "lateness": lateness_summary(late), **got.extra}
        print(f"[failover] {phase}: {json.dumps(out)}", flush=True)
        return out

    # -- phases --------------------------------------------------------------------------

    def steady(self, phase: str, *, rate: int | None = None) -> dict[str, Any]:
        _, dues = self.stream(phase, rate=rate)
        self.wait_phase(phase, dues)
        return self.result(phase, dues)

    def disrupt(self, phase: str, how: str) -> dict[str, Any]:
        """Two dispatchers; a third into the phase, one of them is killed (``kill``) or frozen
        (``stop``); the lateness of what falls due after that."""
        first, dues = self.stream(phase)
        victim = self.live()[0]
        run = self.run_of(victim)
        at_s = (first - now_ms()) / 1000 + self.args.seconds / 3
        time.sleep(max(0.0, at_s))
        at = now_ms()
        (kill_tree if how == "kill" else freeze)(victim)
        taken_s = self.serving(1, timeout_s=60, other_than=frozenset({run}))
        self.wait_phase(phase, dues)
        out = self.result(phase, dues, after_ms=at)
        out["taken_over_after_s"] = round(taken_s, 2)
        if how == "stop":
            thaw(victim)
            try:
                out["exit_after_thaw"] = victim.wait(timeout=60)
            except subprocess.TimeoutExpired:
                out["exit_after_thaw"] = None
                kill_tree(victim)
        self.start()
        out["rejoined_after_s"] = round(self.serving(2, other_than=frozenset({run})), 1)
        return out

    def rolling(self, phase: str) -> dict[str, Any]:
        """Each dispatcher in turn: SIGTERM, then a new one in its place, while a stream goes on
        long enough to cover every restart."""
        _, dues = self.stream(phase, seconds=self.args.seconds * 4)
        time.sleep(LEAD_MS / 1000 + 2)
        steps = []
        for old in self.live():
            run = self.run_of(old)
            began = time.monotonic()
            old.send_signal(signal.SIGTERM)
            handed_s = self.serving(1, timeout_s=30, other_than=frozenset({run}))
            code = old.wait(timeout=60)
            self.start()
            joined_s = self.serving(2, other_than=frozenset({run}))
            steps.append({"handed_over_after_s": round(handed_s, 2), "exit": code,
                          "stopped_after_s": round(time.monotonic() - began - joined_s, 1),
                          "replaced_after_s": round(joined_s, 1)})
        self.wait_phase(phase, dues)
        out = self.result(phase, dues)
        out["steps"] = steps
        out["ended_before_last_due_s"] = round((dues[-1] - now_ms()) / 1000, 1)
        return out

    def drain(self, phase: str) -> dict[str, Any]:
        """``--backlog`` webhooks all due at one instant: rows a second from the first due time
        to the last delivery (the store's delivery times)."""
        n = self.args.backlog
        due = now_ms() + LEAD_MS + n // 5
        self.create(self.channel(phase), [due] * n)
        time.sleep(max(0.0, (due - now_ms()) / 1000 + 1))  # "drained" means nothing after due
        wait_until(lambda: self.store.due_between(from_ms=0, to_ms=now_ms() + 1) == 0
                   and not any(self.store.claimed_by_channel().values()),
                   timeout_s=600, interval_s=0.5, what=f"{phase} drained")
        rows = self.store.list_schedules(channel=phase, status=Status.DELIVERED, limit=n)
        done = [s.delivered_ms for s in rows if s.delivered_ms]
        took_s = (max(done) - due) / 1000 if done else None
        got = self.receiver.outcomes(phase)
        out = {"sent": n, "delivered": len(done), "lost": n - len(got.done_ms),
               "took_s": took_s, "per_s": round(len(done) / took_s, 1) if took_s else 0.0,
               **got.extra}
        print(f"[failover] {phase}: {json.dumps(out)}", flush=True)
        return out

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                thaw(proc)
                kill_tree(proc)
        kill_tree(self.api, signal.SIGTERM)
        self.http.close()
        self.receiver.stop()
        self.store.close()


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def summarize(results: dict[str, Any], runs: dict[str, Any]) -> dict[str, Any]:
    """The figures of the phases run so far, beside them."""
    out = {**results, "runs": runs}
    for name in ("one", "two", "after_kill", "after_stop", "rolling_restart"):
        if runs.get(name, {}).get("lateness", {}).get("p99") is not None:
            out[f"p99_ms_{name}"] = runs[name]["lateness"]["p99"]
    out["lost"] = sum(r.get("lost", 0) for r in runs.values())
    out["repeats_new_id"] = sum(r.get("repeats_with_new_delivery_id", 0)
                                for r in runs.values())
    out["repeats"] = sum(r.get("repeated_deliveries", 0) for r in runs.values())
    if out.get("p99_ms_one") and "p99_ms_two" in out:
        out["p99_two_vs_one"] = round(out["p99_ms_two"] / out["p99_ms_one"], 2)
    for name in ("two", "two_fast"):
        if name in runs:
            out[f"covers_{name}"] = runs[name].get("covers")
    fast = {name: runs.get(name, {}).get("lateness", {}).get("p99")
            for name in ("one_fast", "two_fast")}
    if fast["one_fast"] and fast["two_fast"] is not None:
        out["p99_ms_one_fast"], out["p99_ms_two_fast"] = fast["one_fast"], fast["two_fast"]
        out["p99_two_vs_one_fast"] = round(fast["two_fast"] / fast["one_fast"], 2)
    if runs.get("drain_one", {}).get("per_s") and "drain_two" in runs:
        out["drain_ratio_two_vs_one"] = round(runs["drain_two"]["per_s"]
                                              / runs["drain_one"]["per_s"], 2)
    return out


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    if not args.store.startswith("postgres"):
        raise SystemExit("bench/run failover: give --store postgresql://... (or set "
                         "TOCSIN_TEST_POSTGRES_URL): several dispatchers share a PostgreSQL store")
    only = set(args.only.split(","))
    runs: dict[str, Any] = {}
    results: dict[str, Any] = {"args": {**vars(args), "store": "postgresql"}}

    def phase(name: str, measure: Any, *a: Any, **kw: Any) -> None:
        before = bench.covers()
        runs[name] = {**measure(*a, **kw), "covers": bench.covers() - before}
        write_results(summarize(results, runs), RESULTS)  # each phase kept as it ends

    with tempfile.TemporaryDirectory(prefix="tocsin-failover-") as tmp, \
            postgres_schema(args.store) as url:
        bench = Bench(args, url, Path(tmp))
        try:
            bench.start()
            results["first_ready_s"] = round(bench.serving(1), 1)
            bench.steady("warm")
            if "drain" in only:
                phase("drain_one", bench.drain, "drain_one")
            if "one" in only:
                phase("one", bench.steady, "one")
                if args.compare_rate:
                    phase("one_fast", bench.steady, "one_fast", rate=args.compare_rate)
            bench.start()
            results["second_joined_s"] = round(bench.serving(2), 1)
            if "two" in only:
                phase("two", bench.steady, "two")
                if args.compare_rate:
                    phase("two_fast", bench.steady, "two_fast", rate=args.compare_rate)
            if "drain" in only:
                phase("drain_two", bench.drain, "drain_two")
            if "after_kill" in only:
                phase("after_kill", bench.disrupt, "after_kill", "kill")
            if "after_stop" in only:
                phase("after_stop", bench.disrupt, "after_stop", "stop")
            if "rolling_restart" in only:
                phase("rolling_restart", bench.rolling, "rolling_restart")
            results["owners_at_end"] = {run: ranges for run, ranges
                                        in serving_runs(bench.store).items()}
        finally:
            bench.stop()
    out = summarize(results, runs)
    write_results(out, RESULTS)
    print(json.dumps({k: v for k, v in out.items() if k != "runs"}, default=str))


if __name__ == "__main__":
    main()

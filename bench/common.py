"""What every dispatch target shares: the procedure (warm up, burst, idle, drain), the clock,
lateness statistics, and CPU accounting of a process tree read from ``/proc``.

A *target* is anything that takes schedules and delivers them: Tocsin's Spark dispatcher, the
Celery peer, the plain poller. It only has to say how to submit a chunk of due times, how many
messages it has delivered so far, and when each one of a phase was delivered.
"""

from __future__ import annotations

import math
import os
import platform
import socket
import subprocess
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "CHUNK",
    "CpuMeter",
    "Outcomes",
    "Target",
    "attribute",
    "cpu_between",
    "cpu_probe",
    "free_port",
    "lateness_summary",
    "machine_info",
    "measure_idle",
    "now_ms",
    "pss_kb",
    "run_phase",
    "stop_group",
    "tree_sample",
    "write_results",
]

CHUNK = 10_000
"""Schedules submitted per call (one store transaction, or one producer session)."""

REPO = Path(__file__).resolve().parent.parent


def now_ms() -> int:
    """Wall-clock UTC milliseconds: the clock the dispatcher stamps deliveries with."""
    return time.time_ns() // 1_000_000


# -- CPU of a process tree ------------------------------------------------------------------

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024


@dataclass(frozen=True, slots=True)
class Proc:
    """One process as /proc saw it: its own CPU ticks (utime + stime), resident memory."""

    pid: int
    ppid: int
    started: int
    """Start time in ticks since boot: with the pid, identifies the process."""
    ticks: int
    rss_kb: int
    kind: str


def _kind(pid: int, root: int) -> str:
    if pid == root:
        return "bench"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
    except OSError:
        return "gone"
    for needle, kind in ((b"py-spy", "profiler"), (b"java", "jvm"),
                         # the executors' workers (forked by a daemon whose argument is the
                         # worker module), then the driver's data-source planners and runners
                         (b"daemon pyspark.worker", "python-workers"),
                         (b"pyspark", "python-driver-side"),
                         (b"celery", "celery-worker"), (b"redis-server", "redis"),
                         (b"poller_dispatch", "poller"), (b"nginx", "receiver"),
                         (b"tansu", "kafka-broker"), (b"rabbit", "rabbitmq-broker")):
        if needle in cmd:
            return kind
    return "other"


def _stat(pid: int) -> tuple[int, int, int, int] | None:
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    rest = data[data.rindex(b")") + 2:].split()  # field n of proc(5) is rest[n - 3]
    return int(rest[1]), int(rest[19]), int(rest[11]) + int(rest[12]), int(rest[21]) * PAGE_KB


def pss_kb(pid: int) -> int:
    """A process's proportional set size (a page shared by n processes counts 1/n), 0 once it
    is gone."""
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def busy_ticks() -> int:
    """CPU ticks the whole machine has spent busy since boot (all cores, /proc/stat)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


_ATTRIBUTED: dict[int, str] = {}
"""Processes outside this tree whose CPU is the benchmark's own (a database server it started
or uses alone), by the kind they are counted as: see :func:`attribute`."""


def attribute(pid: int, kind: str) -> None:
    """Count ``pid`` and everything under it as part of this process tree, as ``kind`` (e.g.
    the PostgreSQL server a part runs on: its CPU is the store's work, not other people's
    noise). :class:`CpuMeter` counts it from now on; its memory is not in ``rss_mb``."""
    _ATTRIBUTED[pid] = kind


def tree_sample(root: int | None = None, *, attributed: bool = False) -> dict[int, Proc]:
    """Every live process under ``root`` (default: this one), itself included, and with
    ``attributed`` the processes under each one passed to :func:`attribute` (for CPU only:
    never to stop them)."""
    roots = {os.getpid() if root is None else root: ""}
    if attributed:
        roots.update(_ATTRIBUTED)
    found: dict[int, Proc] = {}
    stats: dict[int, tuple[int, int, int, int]] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for entry in os.listdir("/proc"):
        if entry.isdigit() and (st := _stat(int(entry))) is not None:
            stats[int(entry)] = st
            children[st[0]].append(int(entry))
    for top, kind in roots.items():
        found.update(_subtree(top, kind, stats, children))
    return found


def _subtree(root: int, kind: str, stats: dict[int, tuple[int, int, int, int]],
             children: dict[int, list[int]]) -> dict[int, Proc]:
    """The processes under ``root``, each of ``kind`` (or of its own kind when empty)."""
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        if pid in stats:
            ppid, started, ticks, rss = stats[pid]
            found[pid] = Proc(pid, ppid, started, ticks, rss, kind or _kind(pid, root))
            todo.extend(children.get(pid, ()))
    return found


class CpuMeter:
    """CPU used by this process tree, by kind of process, sampled every ``interval_s`` in a
    thread: the sum of each process's own increments (a process that exits loses at most its
    last interval; children's times are not taken from cutime, which PySpark's forked workers
    do not reliably reach). The sampler's own CPU is not counted."""

    def __init__(self, interval_s: float = 1.0) -> None:
        import threading

        self.interval_s = interval_s
        self._lock = threading.Lock()
        self._last: dict[tuple[int, int], int] = {}
        self._kinds: dict[tuple[int, int], str] = {}
        self._used: dict[str, int] = defaultdict(int)
        self._overhead_s = 0.0
        self._busy0 = busy_ticks()
        self._stop = threading.Event()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, name="cpu-meter", daemon=True)
        self._thread.start()

    def _sample(self, *, first: bool = False) -> dict[int, Proc]:
        with self._lock:
            t0 = time.thread_time()
            procs = tree_sample(attributed=True)
            for p in procs.values():
                key = (p.pid, p.started)
                if key in self._last:
                    self._used[p.kind if p.kind != "gone" else self._kinds[key]] += (
                        p.ticks - self._last[key])
                elif not first:
                    self._used[p.kind] += p.ticks  # born since the last sample
                self._last[key] = p.ticks
                self._kinds[key] = p.kind
            self._overhead_s += time.thread_time() - t0
            return procs

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def read(self) -> dict[str, float]:
        """CPU seconds used since the meter started, by kind; ``outside`` is what the rest of
        the machine used meanwhile (other people's processes: noise), not part of the total."""
        self._sample()
        with self._lock:
            used = {k: v / CLK_TCK for k, v in self._used.items()}
            # ticks are 10 ms coarse, the sampler's own time is exact: never below zero
            used["bench"] = max(0.0, used.get("bench", 0.0) - self._overhead_s)
            machine = (busy_ticks() - self._busy0) / CLK_TCK
            used["outside"] = max(0.0, machine - sum(used.values()) - self._overhead_s)
            return used

    def rss_mb(self, root: int | None = None) -> float:
        """Resident memory of the whole tree now, or of the tree under ``root`` (each
        process's RSS, summed: pages shared between processes count once per process)."""
        return round(sum(p.rss_kb for p in tree_sample(root).values()) / 1024, 1)

    def pss_mb(self, root: int | None = None) -> float:
        """Proportional resident memory of the whole tree now, or of the tree under ``root``
        (a page shared by n processes counts 1/n in each): what it takes from the machine."""
        return round(sum(pss_kb(pid) for pid in tree_sample(root)) / 1024, 1)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def cpu_between(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    """CPU seconds between two :meth:`CpuMeter.read`, by kind and in total."""
    diff = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in sorted(set(before) | set(after))}
    out = {k: round(v, 2) for k, v in diff.items() if abs(v) >= 0.005}
    out["total"] = round(sum(v for k, v in diff.items() if k != "outside"), 2)
    return out


def wait_for_quiet(below_pct: float, max_wait_s: float, log: Callable[[str], None],
                   *, window_s: float = 5.0) -> dict[str, Any]:
    """Wait until the rest of the machine (other people's processes) uses less than
    ``below_pct`` % of one core over ``window_s``, at most ``max_wait_s``: this machine is
    shared, and a phase measured while a test suite runs beside it measures the test suite."""
    started = time.monotonic()
    last_log = 0.0
    while True:
        meter = CpuMeter(interval_s=1.0)
        time.sleep(window_s)
        pct = 100 * meter.read()["outside"] / window_s
        meter.close()
        waited = time.monotonic() - started
        if pct < below_pct or waited > max_wait_s:
            return {"waited_s": round(waited, 1), "outside_cpu_pct_of_one_core": round(pct, 1),
                    "quiet": pct < below_pct}
        if waited - last_log > 60:
            log(f"waiting for the machine to quieten: others use {pct:.0f}% of a core")
            last_log = waited


def measure_idle(seconds: float, *, root: int | None = None) -> dict[str, Any]:
    """CPU used by this process tree over ``seconds`` of doing nothing, as % of one core, and
    the resident memory of the tree under ``root`` (default: this process's, itself included)
    at the end."""
    meter = CpuMeter(interval_s=1.0)
    try:
        time.sleep(seconds)
        used = cpu_between({}, meter.read())
        rss, pss = meter.rss_mb(root), meter.pss_mb(root)
    finally:
        meter.close()
    return {
        "seconds": seconds,
        "cpu_pct_of_one_core": round(100 * used["total"] / seconds, 2),
        "cpu_s_by_kind": used,
        "outside_cpu_pct_of_one_core": round(100 * used.get("outside", 0.0) / seconds, 1),
        "rss_mb": rss,
        "pss_mb": pss,
        "processes": len(tree_sample(root)),
    }


# -- statistics ------------------------------------------------------------------------------


def _pct(ordered: Sequence[int], q: float) -> int:
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def lateness_summary(values: Sequence[int]) -> dict[str, Any]:
    """Nearest-rank percentiles of lateness in milliseconds."""
    if not values:
        return {"count": 0}
    ordered = sorted(values)
    return {"count": len(ordered), "min": ordered[0], "p50": _pct(ordered, 0.50),
            "p90": _pct(ordered, 0.90), "p99": _pct(ordered, 0.99), "max": ordered[-1],
            "mean": round(sum(ordered) / len(ordered), 1)}


# -- the procedure ---------------------------------------------------------------------------


@dataclass(slots=True)
class Outcomes:
    """What became of one phase's messages."""

    due_ms: list[int]
    """Due time of each delivered message."""
    done_ms: list[int]
    """When each was delivered (acknowledged by Tocsin; written by the peer), same order."""
    not_delivered: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


class Target(Protocol):
    """Something that schedules messages and delivers them."""

    name: str
    lead_factor: float
    """How pessimistic to be about ingest speed when placing the first due time."""

    def submit(self, phase: str, first: int, dues: Sequence[int]) -> None:
        """Schedule messages ``first, first + 1, ...`` of ``phase`` at ``dues``."""

    def delivered_total(self) -> int:
        """Messages delivered so far, over every phase."""

    def outcomes(self, phase: str) -> Outcomes:
        """The fate of every message of ``phase``."""


def run_phase(target: Target, phase: str, *, n: int, window_ms: int, wait_s: float,
              ingest_rate_hint: float | None, margin_ms: int = 3_000,
              before_due: Callable[[], None] | None = None,
              after_done: Callable[[], None] | None = None, log: Callable[[str], None] = print,
              gate: Callable[[], dict[str, Any]] | None = None) -> dict[str, Any]:
    """Schedule ``n`` messages due evenly over ``window_ms``, starting ``margin_ms`` after the
    inserts are expected to finish (all at once when the window is 0), and wait until all are
    delivered or ``wait_s`` after the last due time. Without a rate hint they are due at once.
    ``gate`` runs first (waiting for a quiet machine)."""
    gated = gate() if gate else None
    if ingest_rate_hint:
        lead_ms = int(n / (ingest_rate_hint * target.lead_factor) * 1000) + margin_ms
    else:
        lead_ms = 0
    first_due = now_ms() + lead_ms
    dues = [first_due + window_ms * i // n for i in range(n)]
    base = target.delivered_total()
    meter = CpuMeter(interval_s=1.0)
    cpu0 = meter.read()
    started = time.perf_counter()
    chunk_s = []
    for off in range(0, n, CHUNK):
        t = time.perf_counter()
        target.submit(phase, off, dues[off:off + CHUNK])
        chunk_s.append(time.perf_counter() - t)
    ingest_s = time.perf_counter() - started
    ingest_end = now_ms()
    cpu1 = meter.read()
    waited = time.perf_counter()
    log(f"[{target.name}] {phase}: {n} submitted in {ingest_s:.1f}s "
        f"({n / ingest_s:,.0f}/s); first due {'+' if first_due >= ingest_end else ''}"
        f"{(first_due - ingest_end) / 1000:.1f}s after the last insert")
    if before_due:
        before_due()
    deadline = first_due + window_ms + int(wait_s * 1000)
    progress: list[tuple[int, int]] = []
    while True:
        done = target.delivered_total() - base
        progress.append((now_ms() - first_due, done))
        if done >= n or now_ms() > deadline:
            break
        time.sleep(0.5 if n <= CHUNK else 1.0)
    cpu2 = meter.read()
    waited = time.perf_counter() - waited
    meter.close()
    if after_done:
        after_done()
    out = target.outcomes(phase)
    delivered = len(out.done_ms)
    delivery_cpu = cpu_between(cpu1, cpu2)
    last_done = max(out.done_ms) if out.done_ms else now_ms()
    span_ms = max(1, last_done - first_due)
    lateness = [d - u for d, u in zip(out.done_ms, out.due_ms, strict=True)]
    per_second: dict[int, int] = defaultdict(int)
    for d in out.done_ms:
        per_second[(d - first_due) // 1000] += 1
    seconds = range(min(per_second, default=0), max(per_second, default=-1) + 1)
    log(f"[{target.name}] {phase}: {delivered}/{n} delivered, {delivered / span_ms * 1000:,.0f}/s, "
        f"lateness p50 {lateness_summary(lateness).get('p50')} ms "
        f"p99 {lateness_summary(lateness).get('p99')} ms")
    return {
        "schedules": n,
        "window_s": window_ms / 1000,
        "delivered": delivered,
        "not_delivered": out.not_delivered,
        "deliveries_per_s": round(delivered / span_ms * 1000, 1),
        "span_s": round(span_ms / 1000, 2),
        "peak_1s_deliveries": max(per_second.values(), default=0),
        "lateness_ms": lateness_summary(lateness),
        "ingest": {
            "seconds": round(ingest_s, 2),
            "per_s": round(n / ingest_s, 1),
            "chunk": CHUNK,
            "slowest_chunk_s": round(max(chunk_s), 3),
            "first_due_after_last_insert_s": round((first_due - ingest_end) / 1000, 2),
            "cpu_s": cpu_between(cpu0, cpu1),
        },
        "delivery_cpu_s": delivery_cpu,
        "cpu_us_per_delivery": round(1e6 * (delivery_cpu["total"] - delivery_cpu.get(
            "profiler", 0.0)) / delivered, 1) if delivered else None,
        "outside_cpu_pct_of_one_core": round(
            100 * (cpu2.get("outside", 0.0) - cpu1.get("outside", 0.0)) / waited, 1),
        "deliveries_by_second": [per_second.get(s, 0) for s in seconds],
        "progress": progress[:: max(1, len(progress) // 60)],
        "window_ms": [first_due - lead_ms, last_done],
        "gate": gated,
        **out.extra,
    }


# -- processes and the machine ---------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop_group(proc: subprocess.Popen[bytes], *, grace_s: float = 20.0) -> None:
    """Stop a process we started in its own session: SIGTERM to its group, then SIGKILL."""
    import signal

    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=30)
        except ProcessLookupError:
            pass


def cpu_probe() -> float:
    """CPU seconds this process takes for a fixed pure-Python loop (ten million additions):
    the machine's speed at the moment. On a shared host it moves by up to half within
    minutes (0.72 s, then 1.22 s a quarter of an hour later), so absolute rates are recorded
    beside it."""
    started = time.process_time()
    total = 0
    for n in range(10_000_000):
        total += n
    return round(time.process_time() - started, 3)


def machine_info() -> dict[str, Any]:
    """Cores, memory, CPU model and the versions that matter."""
    import sqlite3
    from importlib.metadata import PackageNotFoundError, version

    def _version(name: str) -> str | None:
        try:
            return version(name)
        except PackageNotFoundError:
            return None

    model = next((line.split(":", 1)[1].strip() for line in
                  Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor())
    mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                  if line.startswith("MemTotal"))
    try:
        java = subprocess.run(["java", "-version"], capture_output=True, text=True,
                              timeout=30).stderr.splitlines()[0]
    except (OSError, subprocess.SubprocessError, IndexError):
        java = None
    return {
        "cores": os.cpu_count(), "memory_gb": round(mem_kb / 1024 / 1024, 1),
        "cpu_model": model,
        "kernel": platform.release(), "python": platform.python_version(),
        "pyspark": _version("pyspark"), "pyarrow": _version("pyarrow"), "java": java,
        "sqlite": sqlite3.sqlite_version, "celery": _version("celery"),
        "redis_py": _version("redis"), "apscheduler": _version("apscheduler"),
        "httpx": _version("httpx"), "nginx": _nginx_version(),
    }


def run_stamp() -> dict[str, Any]:
    """The ``date`` (now) and ``commit`` (``HEAD``, ``+`` when ``src/`` has changes not
    committed) of a run, for its results file: the summary table of docs/benchmarks.md
    (``bench/run summary``) shows them beside each figure."""
    from datetime import UTC, datetime

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                                  timeout=30).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "?"
    if git("status", "--porcelain", "--", "src"):
        commit += "+"
    return {"date": datetime.now(UTC).isoformat(timespec="seconds"), "commit": commit}


def write_results(out: dict[str, Any], path: Path) -> None:
    """Add the machine, the date and the commit (:func:`run_stamp`) to a benchmark's
    results, write them as JSON to ``path`` and print its rates (the keys ending ``_per_s``)
    on one line."""
    import json

    out.update(run_stamp())
    out["machine"] = machine_info()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({k: v for k, v in out.items() if k.endswith("_per_s")}))


def _nginx_version() -> str | None:
    try:
        return subprocess.run(["nginx", "-v"], capture_output=True, text=True,
                              timeout=10).stderr.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None

"""``tocsin up`` tells the truth and is light: a taken port stops it at once, saying so, before
anything claims readiness; one log line says when ``/readyz`` turns ready; ready within its
bound; idle, its whole process tree stays under the CPU bound; after the quiet spell a
recurring rule (expanded in the driver) still goes out."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from tocsin.cli import runner
from tocsin.clock import SystemClock
from tocsin.domain import ChannelKind, ChannelSpec, CronTrigger, Recurring
from tocsin.stores import open_store
from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import read_lines, wait_until
from tocsin.testing.processes import descendants, kill_tree, start_tocsin

READY_BOUND_S = 12.0
"""docs/benchmarks.md: ready within 12 s on an installed, quiet machine."""
IDLE_CPU_BOUND_PCT = 1.0
"""docs/benchmarks.md: an idle dispatcher (the whole tree) uses at most 1 % of one core."""


def test_a_taken_port_stops_tocsin_up_before_anything_claims_readiness(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {**os.environ, "TOCSIN_HOME": str(tmp_path / "home"),
               "TOCSIN_API_PORT": str(port)}
        began = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "tocsin", "up"], env=env,
                              capture_output=True, text=True, timeout=120)
        took = time.monotonic() - began
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert any(f"127.0.0.1:{port} is taken" in line for line in lines), done.stderr
    assert not any("ready" in line or "dispatcher" in line for line in lines), done.stderr
    assert took < 60  # no Spark started: it stops in the time Python takes to start


class _Deps:
    """Stands in for the API's dependencies: :func:`readiness_problems` is patched."""


def test_the_ready_line_comes_once_when_readyz_turns_ready(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    answers = iter([["dispatcher: run r is starting"]] * 3 + [[]] * 4
                   + [["dispatcher: no heartbeat for 11 s"]] + [[]] * 100)
    monkeypatch.setattr("tocsin.api.health.readiness_problems", lambda deps: next(answers))
    monkeypatch.setattr(runner.ReadyLog, "FAST_S", 0.001)
    monkeypatch.setattr(runner.ReadyLog, "SLOW_S", 0.001)
    logger = runner.log
    monkeypatch.setattr(logger, "propagate", True)
    with caplog.at_level("INFO", logger="tocsin.runner"):
        watch = runner.ReadyLog(_Deps(), started=time.monotonic()).start()  # type: ignore[arg-type]
        wait_until(lambda: sum(r.getMessage() == "ready" for r in caplog.records) >= 2,
                   timeout_s=10, interval_s=0.01, what="ready twice")
        watch.stop()
    said = [r.getMessage() for r in caplog.records]
    assert said[:3] == ["ready", "not ready", "ready"]


def _tree_cpu_s(pid: int) -> dict[int, float]:
    """CPU seconds of each live process of the tree, by pid."""
    cpu = {}
    for p in [pid, *descendants(pid)]:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        cpu[p] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return cpu


def _tree_rss_mb(pid: int) -> float:
    total = 0
    for p in [pid, *descendants(pid)]:
        try:
            total += int(Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[21])
        except OSError:
            continue
    return total * os.sysconf("SC_PAGE_SIZE") / 2**20


@pytest.mark.spark
@pytest.mark.slow
def test_idle_tocsin_up_is_ready_soon_and_light(tmp_path: Path,
                                                say: Callable[[str], None]) -> None:
    """Generous bounds (the suite shares two cores); the figures are printed."""
    port = free_port()
    log = tmp_path / "up.log"
    env = {"TOCSIN_HOME": str(tmp_path / "home"), "TOCSIN_API_PORT": str(port)}
    began = time.monotonic()
    proc = start_tocsin("up", env=env, log=log)
    try:
        while True:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() - began < 10 * READY_BOUND_S, log.read_text()
            time.sleep(0.1)
        ready_s = time.monotonic() - began
        time.sleep(70)  # Spark stops Python workers idle for a minute
        cpu, idle_s = _tree_cpu_s(proc.pid), 60.0
        time.sleep(idle_s)
        # the CPU of the processes alive at the end, since the start or their own start (one
        # that ended meanwhile, a worker Spark stopped, loses at most its last minute)
        pct = 100 * sum(v - cpu.get(p, 0.0) for p, v in _tree_cpu_s(proc.pid).items()) / idle_s
        rss = _tree_rss_mb(proc.pid)
        # after the quiet spell: a recurring rule, expanded in the driver, goes out
        out = tmp_path / "ticks.jsonl"
        store = open_store(f"sqlite:///{tmp_path / 'home' / 'tocsin.db'}")
        store.put_channel(ChannelSpec(name="ticks", kind=ChannelKind.FILE,
                                      config={"path": str(out)}))
        first = (SystemClock().now_ms() // 1000 + 3) * 1000
        store.create_recurring(Recurring(
            id="ticks", channel="ticks", payload=b"{}", trigger=CronTrigger.parse(
                "* * * * * *", "UTC", start_ms=first, end_ms=first + 2000)),
            now_ms=SystemClock().now_ms())
        wait_until(lambda: len(read_lines(out)) >= 3, timeout_s=120, what="three ticks")
        woke_ms = SystemClock().now_ms() - (first + 2000)
        store.close()
    finally:
        kill_tree(proc, signal.SIGTERM)
    lines = log.read_text(errors="replace").splitlines()
    readies = [line for line in lines if line.split(": ", 1)[-1].startswith("ready")]
    say(f"ready after {ready_s:.1f} s (bound {READY_BOUND_S} s on a quiet machine); idle "
        f"{pct:.2f} % of one core over {idle_s:.0f} s (bound {IDLE_CPU_BOUND_PCT} %); "
        f"tree RSS {rss:.0f} MB; after it, a recurring rule's last tick seen {woke_ms} ms "
        "after its due time")
    assert len(readies) == 1, "\n".join(lines)
    assert pct < 5 * IDLE_CPU_BOUND_PCT

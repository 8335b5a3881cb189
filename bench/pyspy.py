"""Sample the Python processes of a Spark application with py-spy (when it is installed) and
summarise where their CPU time goes. ``pip install py-spy`` into the venv; it is not a
dependency of Tocsin."""

from __future__ import annotations

import re
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from bench.common import tree_sample

__all__ = ["PySpy", "summarise"]

_LINE = re.compile(r":\d+\)$")
_WAITING = {"manager (daemon.py)"}
"""Leaf frames that are a process waiting for work (py-spy --nonblocking counts them busy)."""


class PySpy:
    """One ``py-spy record --subprocesses`` per top-level Python process under the JVM."""

    def __init__(self, out_dir: Path, *, rate: int = 50) -> None:
        exe = Path(sys.executable).with_name("py-spy")
        self.exe = str(exe) if exe.exists() else shutil.which("py-spy")
        self.out_dir = out_dir
        self.rate = rate
        self.procs: list[tuple[int, Path, subprocess.Popen[bytes]]] = []

    @property
    def available(self) -> bool:
        return self.exe is not None

    def start(self) -> list[int]:
        """Attach to every Python child of the JVM (the worker daemon and the driver-side data
        source runner); their forked workers are followed."""
        tree = tree_sample()
        jvms = {p.pid for p in tree.values() if p.kind == "jvm"}
        roots = [p.pid for p in tree.values() if p.ppid in jvms and p.kind.startswith("python")]
        for pid in roots:
            out = self.out_dir / f"pyspy-{pid}.txt"
            proc = subprocess.Popen(
                [str(self.exe), "record", "--pid", str(pid), "--subprocesses", "--nonblocking",
                 "--rate", str(self.rate), "--format", "raw", "-o", str(out)],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self.procs.append((pid, out, proc))
        return roots

    def stop(self) -> list[Path]:
        """Stop the samplers (SIGINT makes py-spy write its file) and return the files."""
        for _, _, proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
        files = []
        for _, out, proc in self.procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
            if out.exists():
                files.append(out)
        return files


def _frame(raw: str) -> str:
    return _LINE.sub(")", raw.strip())


def summarise(files: list[Path], *, top: int = 20) -> dict[str, Any]:
    """Samples per process, the functions that burn CPU themselves (self), and the Tocsin and
    PySpark functions whose callees burn it (inclusive), as % of all samples."""
    total = 0
    self_time: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    per_process: Counter[str] = Counter()
    for path in files:
        for line in path.read_text(errors="replace").splitlines():
            stack, _, count_s = line.rpartition(" ")
            if not stack or not count_s.isdigit():
                continue
            count = int(count_s)
            frames = stack.split(";")
            if frames and frames[0].startswith("process "):
                cmd = frames.pop(0)
                per_process["pyspark.daemon workers" if "daemon" in cmd else cmd[:80]] += count
            if not frames:
                continue
            names = [_frame(f) for f in frames]
            if names[-1] in _WAITING:
                continue
            total += count
            self_time[names[-1]] += count
            for name in set(names):
                inclusive[name] += count

    def pct(n: int) -> float:
        return round(100 * n / total, 1) if total else 0.0

    interesting = [(name, n) for name, n in inclusive.most_common()
                   if any(k in name for k in ("tocsin", "sink.py", "source.py", "deliver.py",
                                              "sqlite.py", "file.py", "worker.py", "serializers",
                                              "datasource"))]
    return {
        "samples": total,
        "samples_by_process": dict(per_process.most_common()),
        "self_pct": [(name, pct(n)) for name, n in self_time.most_common(top)],
        "inclusive_pct": [(name, pct(n)) for name, n in interesting[:top * 2]],
    }

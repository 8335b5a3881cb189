"""Start Tocsin's own processes (``python -m tocsin ...``) for crash tests, and kill them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["descendants", "executor_jvms", "freeze", "kill_tree", "start_tocsin", "thaw"]


def start_tocsin(verb: str, *, env: dict[str, str], log: Path,
                 cwd: Path | None = None) -> subprocess.Popen[bytes]:
    """``python -m tocsin <verb>`` in its own process group, output to ``log``, in the
    working directory ``cwd`` (default: this process's)."""
    full_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                **env}
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "tocsin", verb], env=full_env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True,
                                cwd=cwd)


def kill_tree(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group we started (the driver, its JVM and Python workers)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    proc.wait(timeout=60)


def freeze(proc: subprocess.Popen[bytes]) -> None:
    """SIGSTOP the process group we started: the whole dispatcher (driver, JVM, Python
    workers) stops where it is, as a frozen machine does, its connections left open."""
    os.killpg(proc.pid, signal.SIGSTOP)


def thaw(proc: subprocess.Popen[bytes]) -> None:
    """SIGCONT the process group :func:`freeze` stopped."""
    os.killpg(proc.pid, signal.SIGCONT)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (read from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            ppid = int(stat.rsplit(")", 1)[1].split()[1])
            children.setdefault(ppid, []).append(int(entry))
    found, stack = [], [pid]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def executor_jvms(driver_pid: int) -> list[int]:
    """The executor JVMs (``CoarseGrainedExecutorBackend``) under a dispatcher process."""
    found = []
    for pid in descendants(driver_pid):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"CoarseGrainedExecutorBackend" in cmdline:
            found.append(pid)
    return found

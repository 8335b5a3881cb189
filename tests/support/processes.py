"""Start Tocsin's own processes (``python -m tocsin ...``) for crash tests, and kill them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

__all__ = ["kill_tree", "start_tocsin"]


def start_tocsin(verb: str, *, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """``python -m tocsin <verb>`` in its own process group, output to ``log``."""
    full_env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
                **env}
    with log.open("ab") as sink:
        return subprocess.Popen([sys.executable, "-m", "tocsin", verb], env=full_env,
                                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)


def kill_tree(proc: subprocess.Popen[bytes], sig: int = signal.SIGKILL) -> None:
    """Send ``sig`` to the process group we started (the driver, its JVM and Python workers)."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    proc.wait(timeout=60)

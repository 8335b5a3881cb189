"""The test helpers that start Tocsin's own processes: nothing they start outlives the test
process, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import wait_until

PARENT = """
import sys, time
from pathlib import Path
from tocsin.testing.processes import start_tocsin
child = start_tocsin("api", env={"TOCSIN_HOME": sys.argv[1], "TOCSIN_API_PORT": sys.argv[2]},
                     log=Path(sys.argv[1]) / "api.log")
print(child.pid, flush=True)
time.sleep(120)
"""


def _gone(pid: int) -> bool:
    """Whether ``pid`` has exited (gone, or a zombie not yet reaped)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_a_started_process_ends_when_the_test_process_is_killed(tmp_path: Path) -> None:
    """Bug: a test run stopped from outside (kill -9, a timeout) left its ``tocsin up`` and
    ``tocsin api`` children running, ready to disturb the next run. A child started by
    ``start_tocsin`` now gets SIGTERM when its parent dies."""
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(tmp_path), str(free_port())],
                              stdout=subprocess.PIPE, text=True)
    child = -1
    try:
        assert parent.stdout is not None
        child = int(parent.stdout.readline())
        assert not _gone(child)
        parent.kill()
        parent.wait(timeout=10)
        wait_until(lambda: _gone(child), timeout_s=30, what="the orphaned child's end")
    finally:
        if parent.poll() is None:
            parent.kill()
        if child > 0 and not _gone(child):
            os.killpg(child, signal.SIGKILL)

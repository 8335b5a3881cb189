"""The README's quickstart, as written, against ``tocsin up`` (SQLite + Spark local mode)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import read_lines, wait_until
from tocsin.testing.processes import kill_tree, start_tocsin

pytestmark = [pytest.mark.spark, pytest.mark.slow]


def test_readme_quickstart(tmp_path: Path) -> None:
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    # TOCSIN_HOME as run.sh leaves it (.tocsin beside the commands), and the default file
    # roots (home/channels), not the tests' wider ones
    env = {"TOCSIN_HOME": str(tmp_path / ".tocsin"), "TOCSIN_API_PORT": str(port),
           "TOCSIN_SPARK_MASTER": "local[*]", "TOCSIN_API_URL": api, "TOCSIN_FILE_ROOTS": ""}
    up = start_tocsin("up", env=env, log=tmp_path / "up.log")

    def tocsin(*args: str) -> str:
        # PYTHONPATH: the tocsin under test, not one installed in the environment
        cli_env = {**env, "PATH": "", "PYTHONPATH": os.environ.get("PYTHONPATH", "")}
        done = subprocess.run([sys.executable, "-m", "tocsin", *args], cwd=tmp_path,
                              env=cli_env, capture_output=True, text=True, timeout=60,
                              check=True)
        return done.stdout

    try:
        wait_until(lambda: _ready(api), timeout_s=180, interval_s=1, what="tocsin up")
        # the loopback allowance of the single-user mode is a setting, said at start
        assert "TOCSIN_ALLOW_LOOPBACK=true" in (tmp_path / "up.log").read_text()
        tocsin("channels", "add", "greetings", "--kind", "file", "--path", "greetings.jsonl")
        # --delay 15: the cancel below must come before the schedules fall due, four `tocsin`
        # processes later (each 1-2 s to start on a busy two-core machine; 5 s was too short)
        for n in (1, 2, 3):
            tocsin("schedule", "greetings", "--payload", json.dumps({"n": n}), "--delay", "15")
        first = json.loads(tocsin("ls", "--status", "PENDING"))[0]["id"]
        assert json.loads(tocsin("cancel", first))["status"] == "CANCELLED"
        out = tmp_path / ".tocsin" / "channels" / "greetings.jsonl"  # the README's last line
        wait_until(lambda: len(read_lines(out)) == 2, timeout_s=60, what="two lines")
        # nothing is left to deliver: the two acknowledged, the cancelled one stays cancelled
        wait_until(lambda: len(json.loads(tocsin("ls", "--status", "DELIVERED"))) == 2,
                   timeout_s=60, what="two acknowledged")
        assert json.loads(tocsin("get", first))["schedule"]["status"] == "CANCELLED"
        assert json.loads(tocsin("ls", "--status", "PENDING")) == []
        assert json.loads(tocsin("ls", "--status", "CLAIMED")) == []
        lines = read_lines(out)
        assert len(lines) == 2 and first not in {line["schedule_id"] for line in lines}
    finally:
        kill_tree(up, sig=15)


def _ready(api: str) -> bool:
    try:
        return httpx.get(f"{api}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False

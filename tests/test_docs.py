"""The docs keep up with the code: every setting is documented, every doc the README links
to exists, the CHANGELOG names the version being built, every ``tocsin`` command of the docs
parses, and every command block that talks to the API runs against a live ``tocsin up``."""

from __future__ import annotations

import io
import os
import re
import shlex
import signal
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import httpx
import pytest
import typer

from tests.support.doc_commands import DocBlock, doc_blocks, simple_commands, words
from tocsin import __version__
from tocsin.config import Settings
from tocsin.testing.api_server import free_port
from tocsin.testing.dispatch import wait_until
from tocsin.testing.processes import kill_tree, start_tocsin

ROOT = Path(__file__).resolve().parent.parent


def test_every_setting_is_in_the_configuration_doc() -> None:
    text = (ROOT / "docs" / "configuration.md").read_text()
    missing = [f"TOCSIN_{name.upper()}" for name in Settings.model_fields
               if f"`TOCSIN_{name.upper()}`" not in text]
    assert missing == [], f"docs/configuration.md lacks {missing}"


def test_the_readme_links_only_to_docs_that_exist() -> None:
    links = re.findall(r"\]\((docs/[^)#]+)", (ROOT / "README.md").read_text())
    assert links and [link for link in links if not (ROOT / link).exists()] == []


def test_the_changelog_starts_with_this_version() -> None:
    """pyproject.toml, ``tocsin.__version__`` and the CHANGELOG's newest entry agree."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    newest = re.search(r"^## (\S+)", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert newest is not None and newest.group(1) == project == __version__


# -- the docs' commands -------------------------------------------------------------------------

@cache
def _cli() -> Any:
    """The ``tocsin`` command as click sees it (typer's own copy of click: no click types)."""
    from tocsin.cli import app

    return typer.main.get_command(app)


def _command_of(args: list[str]) -> Any:
    """The ``tocsin`` (sub)command ``args`` name (None: no such one), options of the groups
    skipped."""
    command = _cli()
    for arg in args:
        if not hasattr(command, "commands"):
            return command
        if arg.startswith("-"):
            continue
        found = command.commands.get(arg)
        if found is None:
            return None
        command = found
    return command


def _invocations(block: DocBlock) -> list[list[str]]:
    """The arguments of each ``tocsin`` command in ``block``."""
    found = []
    for command in simple_commands(block.script):
        split = words(command)
        if split and (split[0] == "tocsin" or split[0].endswith("/tocsin")):
            found.append(split[1:])
    return found


def _talks_to_the_api(block: DocBlock) -> bool:
    """A ``curl`` to the API, or a ``tocsin`` verb that takes ``--api`` (and is not told
    ``--local``)."""
    for command in simple_commands(block.script):
        split = words(command)
        if split[:1] == ["curl"] and any(API_ADDRESS.search(w) for w in split):
            return True
    for args in _invocations(block):
        command = _command_of(args)
        if (command is not None and any(p.name == "api" for p in command.params)
                and "--local" not in args):
            return True
    return False


API_ADDRESS = re.compile(r"(localhost|127\.0\.0\.1):8765|tocsin\.example\.com")
BLOCKS = doc_blocks(ROOT)


def test_the_docs_have_commands_to_check() -> None:
    """The extraction finds the blocks it is meant for (a guard against it finding none)."""
    live = {(block.where.split(":")[0], line) for block in BLOCKS if _talks_to_the_api(block)
            for line in block.script.splitlines()}
    assert {("README.md", "tocsin channels add greetings --kind file --path greetings.jsonl"),
            ("docs/recurring.md", "curl -s localhost:8765/v1/policies -H \"$KEY\" -H "
                                  "'content-type: application/json' \\"),
            ("docs/operations.md", "tocsin channels paused              # GET /v1/paused-channels"),
            ("docs/security.md", "tocsin apikeys create --role admin --name ops")} <= live


def test_every_tocsin_command_of_the_docs_parses() -> None:
    """Each ``tocsin`` command in README.md and docs/*.md names a command that exists and
    only options it takes (checked by click with ``--help`` appended: nothing runs)."""
    failures, checked = [], 0
    for block in BLOCKS:
        for args in _invocations(block):
            checked += 1
            shown = io.StringIO()
            try:
                with redirect_stdout(shown), redirect_stderr(shown):
                    _cli().main([*args, "--help"], prog_name="tocsin", standalone_mode=False)
            except Exception as exc:  # click's UsageError, NoSuchOption...
                failures.append(f"{block.where}: tocsin {shlex.join(args)}: {exc}")
    assert not failures, "\n".join(failures)
    assert checked > 100


# A placeholder of the docs -> what stands for it here ({...} filled from the live server).
PLACEHOLDERS = {
    "localhost:8765": "{host}",
    "127.0.0.1:8765": "{host}",
    "https://tocsin.example.com": "{api}",
    "TOCSIN_STORE=...": "TOCSIN_STORE={store}",
    "tsk_…": "$(cat .tocsin/admin.key)",
    "01JD…": "{dead}",
}
PRELUDE = r"""set -eo pipefail
tocsin() { "$DOCS_PYTHON" -m tocsin "$@"; }
# curl as written, but an HTTP error status fails the block (curl itself exits 0 on a 401)
curl() {
  local out code
  out=$(command curl --write-out '\n%{http_code}' "$@") || return
  code=${out##*$'\n'}
  printf '%s\n' "${out%$'\n'*}"
  if [ "$code" -ge 400 ]; then echo "curl: HTTP $code: $*" >&2; return 22; fi
}
"""


def _runnable_inline(block: DocBlock) -> bool:
    """An inline span that is a whole command: options given (``tocsin apikeys create`` in a
    sentence names a verb), and no ``<id>``, ``[--option]``, ``…``, ``add|ls|rm`` or an
    upper-case positional such as ``ID``."""
    if "\n" in block.script or any(mark in block.script for mark in "<>[]…|"):
        return False
    split = words(block.script)
    placeholder = any(word.isupper() and not split[i - 1].startswith("-")
                      for i, word in enumerate(split) if i and word.replace("_", "").isalpha())
    return any(word.startswith("-") for word in split) and not placeholder


LIVE = [block for block in BLOCKS if _talks_to_the_api(block)
        and ("\n" in block.script or _runnable_inline(block))]


@dataclass
class LiveUp:
    """``tocsin up`` in ``home``'s parent, as ``./run.sh`` leaves it, and what the docs'
    examples assume exists (a channel ``billing``, a DEAD schedule)."""

    cwd: Path
    api: str
    env: dict[str, str]
    dead: str = ""


@pytest.fixture(scope="module")
def live_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveUp]:
    cwd = tmp_path_factory.mktemp("docs")
    port = free_port()
    api = f"http://127.0.0.1:{port}"
    # TOCSIN_HOME as run.sh leaves it (.tocsin beside the commands); the default file roots
    env = {"TOCSIN_HOME": ".tocsin", "TOCSIN_API_PORT": str(port), "TOCSIN_FILE_ROOTS": "",
           "TOCSIN_SPARK_MASTER": "local[*]", "TOCSIN_TRIGGER_SECONDS": "0.5"}
    up = start_tocsin("up", env=env, log=cwd / "up.log", cwd=cwd)
    try:
        wait_until(lambda: _ready(api), timeout_s=240, interval_s=1, what="tocsin up")
        (cwd / ".venv" / "bin").mkdir(parents=True)  # README: `. .venv/bin/activate`
        (cwd / ".venv" / "bin" / "activate").write_text(":\n")
        yield LiveUp(cwd=cwd, api=api, env=env, dead=_dead_schedule(cwd, api))
    finally:
        kill_tree(up, sig=signal.SIGTERM)


def _ready(api: str) -> bool:
    try:
        return httpx.get(f"{api}/readyz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _dead_schedule(cwd: Path, api: str) -> str:
    """A channel ``billing`` and one DEAD schedule (its one attempt found nobody listening)."""
    key = {"authorization": f"Bearer {(cwd / '.tocsin' / 'admin.key').read_text().strip()}"}
    nobody = f"http://127.0.0.1:{free_port()}/hook"
    with httpx.Client(base_url=api, headers=key, timeout=10) as http:
        http.post("/v1/channels", json={"name": "refuses", "kind": "webhook", "config": {
            "url": nobody, "max_attempts": 1}}).raise_for_status()
        http.post("/v1/channels", json={"name": "billing", "kind": "file",
                                        "config": {"path": "billing.jsonl"}}).raise_for_status()
        made = http.post("/v1/schedules", json={"channel": "refuses", "payload": {},
                                                "delay": 0})
        made.raise_for_status()
        dead: str = made.json()["id"]
        wait_until(lambda: http.get(f"/v1/schedules/{dead}").json()["status"] == "DEAD",
                   timeout_s=60, what="a DEAD schedule")
    return dead


@pytest.mark.spark
@pytest.mark.slow
def test_every_api_command_of_the_docs_runs(live_up: LiveUp) -> None:
    """Each block of README.md and docs/*.md that talks to the API (``curl``, or a ``tocsin``
    verb that takes ``--api``), run as written by bash against a live ``tocsin up`` — only the
    address and the placeholders of :data:`PLACEHOLDERS` replaced. A missing header, a renamed
    flag or route fails here; so does a new placeholder this test does not know."""
    host = live_up.api.removeprefix("http://")
    values = {"host": host, "api": live_up.api, "dead": live_up.dead,
              "store": f"sqlite:///{live_up.cwd / '.tocsin' / 'tocsin.db'}"}
    env = {**os.environ, **live_up.env, "DOCS_PYTHON": sys.executable,
           "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    env.pop("TOCSIN_API_KEY", None)
    failures = []
    for block in LIVE:
        script = block.script
        for mark, value in PLACEHOLDERS.items():
            script = script.replace(mark, value.format(**values))
        if "…" in script or "..." in script:
            failures.append(f"{block.where}: a placeholder this test does not know:\n{script}")
            continue
        done = subprocess.run(["bash", "-c", PRELUDE + script], cwd=live_up.cwd, env=env,
                              capture_output=True, text=True, timeout=180)
        if done.returncode != 0:
            failures.append(f"{block.where} exited {done.returncode}:\n{script}\n"
                            f"stdout: {done.stdout[-1500:]}\nstderr: {done.stderr[-1500:]}")
    assert not failures, "\n\n".join(failures)
    assert len(LIVE) >= 10

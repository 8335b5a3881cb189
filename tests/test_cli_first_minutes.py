"""The ``tocsin`` command as a newcomer meets it: one line (no traceback) when the API is not
running, a table that fits an 80-column terminal with whole ids, flags named in errors, and a
``--help`` without type noise, its verbs in sections."""

from __future__ import annotations

import enum
import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
from typer.testing import CliRunner

from tocsin.cli import app
from tocsin.cli.app import SECTIONS, plain_help
from tocsin.cli.common import span
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer, free_port

runner = CliRunner()


def _tocsin(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "tocsin", *args], capture_output=True,
                          text=True, timeout=60, env={**os.environ, **(env or {})})


def test_a_server_that_is_down_is_one_line_and_exit_1() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    for verb in (["ls"], ["status"], ["cancel", "x"], ["channels", "ls"]):
        done = _tocsin(*verb, "--api", url)
        assert done.returncode == 1, (verb, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "Traceback" not in done.stderr, (verb, done.stderr)
        assert url in lines[0] and "tocsin up" in lines[0]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ApiServer]:
    store = SQLiteStore(tmp_path_factory.mktemp("ls") / "t.db", buckets=8)
    served = ApiServer(store).start()
    yield served
    served.stop()


def _in_terminal(args: list[str], env: dict[str, str], columns: int = 80) -> str:
    """What ``tocsin ARGS`` prints to a pseudo terminal ``columns`` wide (stdin is not a
    terminal: rich would take its size first)."""
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    clean = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    proc = subprocess.Popen([sys.executable, "-m", "tocsin", *args], stdout=child,
                            stdin=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, env={**clean, **env, "TERM": "xterm"})
    os.close(child)
    out = b""
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(main, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        out += chunk
    os.close(main)
    assert proc.wait(60) == 0, proc.stderr.read() if proc.stderr else ""
    return re.sub(r"\x1b\[[0-9;]*m", "", out.decode())  # without colours and bold


def test_ls_in_an_80_column_terminal_shows_whole_ids(server: ApiServer) -> None:
    store = server.store
    store.put_channel(ChannelSpec(name="greetings-to-everyone", kind=ChannelKind.FILE,
                                  config={"path": "g.jsonl"}))
    made = store.create([NewSchedule(channel="greetings-to-everyone", payload=b"{}",
                                     due_ms=4_102_444_800_000 + n) for n in range(3)],
                        now_ms=1_000)
    env = {"TOCSIN_API_KEY": server.admin_key, "TOCSIN_API_URL": server.url}
    shown = _in_terminal(["ls"], env)
    lines = shown.splitlines()
    assert all(len(line) <= 80 for line in lines), shown
    assert all(s.id in shown for s, _ in made), shown
    assert "status" in shown and "due_at" in shown
    wide = _in_terminal(["ls", "--wide"], env, columns=250)
    assert all(s.id in wide for s, _ in made) and "created_at" in wide
    piped = runner.invoke(app, ["ls", "--api", server.url], env=env)  # not a terminal: JSON
    assert piped.exit_code == 0 and piped.output.lstrip().startswith("[")


def test_schedule_without_a_message_or_a_time_names_the_flags() -> None:
    url = f"http://127.0.0.1:{free_port()}"  # refused before any call
    none = runner.invoke(app, ["schedule", "greetings", "--delay", "5", "--api", url])
    assert none.exit_code == 1 and "--payload" in none.output and "--text" in none.output
    when = runner.invoke(app, ["schedule", "greetings", "--text", "hi", "--api", url])
    assert when.exit_code == 1 and "--delay" in when.output and "--at" in when.output
    assert "payload_text" not in none.output + when.output


def test_delays_read_as_seconds() -> None:
    assert [span(v) for v in ("90", "1.5", "90s", "5m", "2h", "1d", "PT5M")] == [
        90.0, 1.5, 90.0, 300.0, 7200.0, 86400.0, "PT5M"]
    assert "seconds" in runner.invoke(app, ["schedule", "--help"]).output


def test_help_lists_every_verb_in_a_section_without_type_noise() -> None:
    shown = runner.invoke(app, ["--help"]).output
    assert "<bool>" not in shown
    assert [title for title in SECTIONS if f"{title}:" in shown] == list(SECTIONS)
    assert "Other:" not in shown  # every verb has its section
    assert shown.index("up ") < shown.index("schedule ") < shown.index("channels ")
    assert "<bool>" not in runner.invoke(app, ["apikeys", "create", "--help"]).output


TYPE_PLACEHOLDER = re.compile(
    r"<(?:str|int|float|bool|path|datetime|[a-z]+ range|list\[[^\]]*\]|[a-z_]+(?:\|[a-z_]+)+)>")
"""What typer writes after an option or argument: ``<str>``, ``<list[str]>``, ``<int range>``,
``<text|json>``."""


def _verbs(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every verb of the command tree, as the words that call it."""
    yield path
    for name, sub in getattr(command, "commands", {}).items():
        yield from _verbs(sub, (*path, name))


def test_every_verbs_help_names_its_values_without_type_placeholders() -> None:
    verbs = list(_verbs(typer.main.get_command(app)))
    assert ("schedule",) in verbs and ("channels", "add") in verbs and len(verbs) > 40
    for verb in verbs:
        shown = runner.invoke(app, [*verb, "--help"], terminal_width=100).output
        assert shown.startswith("Usage:"), (verb, shown)
        assert not TYPE_PLACEHOLDER.search(shown), (verb, shown)
        assert "{" not in shown.splitlines()[0], (verb, shown)  # usage: CHANNEL, not {channel}
    shown = runner.invoke(app, ["schedule", "--help"]).output
    assert "--header HEADER" in shown and "[OPTIONS] CHANNEL" in shown


class Fmt(enum.Enum):
    """A choice, for :func:`test_plain_help_shows_choices_and_names`."""

    TEXT = "text"
    JSON = "json"


def test_plain_help_shows_choices_and_names() -> None:
    tiny = typer.Typer(rich_markup_mode=None)

    @tiny.command()
    def go(where: str, fmt: Fmt = Fmt.TEXT, tag: list[str] | None = None,
           n: Annotated[int, typer.Option(min=1)] = 1) -> None:
        """Go."""

    command = typer.main.get_command(tiny)
    plain_help(command)
    shown = command.get_help(command.make_context("go", [], resilient_parsing=True))
    assert "--fmt [text|json]" in shown and "--tag TAG" in shown and "--n N" in shown
    assert "Usage: go [OPTIONS] WHERE" in shown
    assert not TYPE_PLACEHOLDER.search(shown), shown


def test_the_readme_quickstart_names_the_cancelled_one_and_the_dashboard() -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    quickstart = readme.split("## Quickstart", 1)[1].split("\n## ", 1)[0]
    assert "the first was cancelled" in quickstart and "/ui" in quickstart

"""Issue 40, finding 5: a tenant's names reach an admin's terminal through ``tocsin ls
--wide`` and ``tocsin status`` as inert text: no escape sequence (a cleared screen, a window
title, a clickable link) and no Rich markup is acted on."""

from __future__ import annotations

from typing import Any

import pytest

from tocsin.cli import output

EVIL = ["\x1b]0;owned\x07", "\x1b[2J\x1b[H", "[link=https://evil.example]click[/link]",
        "\x1b]8;;https://evil.example\x1b\\here\x1b]8;;\x1b\\", "\u202eevil", "[bold red]x"]


@pytest.fixture(autouse=True)
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(output, "_is_terminal", lambda: True)
    monkeypatch.setenv("COLUMNS", "400")
    output.set_json(False)


def _shown(capsys: pytest.CaptureFixture[str]) -> str:
    out: str = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "\u202e" not in out, repr(out)
    return out


def test_ls_wide_shows_keys_and_ordering_keys_inert(capsys: pytest.CaptureFixture[str]) -> None:
    rows: list[dict[str, Any]] = [{"id": f"s{n}", "key": evil, "ordering_key": evil,
                                   "tenant": "acme", "headers": {evil: evil}}
                                  for n, evil in enumerate(EVIL)]
    output.emit(rows)
    out = _shown(capsys)
    assert "[link=https://evil.example]" in out and "[bold red]x" in out


def test_status_shows_tenant_names_inert(capsys: pytest.CaptureFixture[str]) -> None:
    status = {"api": "ok", "store": "sqlite", "tenant": EVIL[2],
              "halted_keys": [{"tenant": "acme", "ordering_key": e} for e in EVIL],
              "paused_channels": [{"tenant": "acme", "name": e} for e in EVIL],
              "held_channels": [{"tenant": "acme", "name": EVIL[0], "reason": "open",
                                 "until": "soon", "failures": 3, "last_error": EVIL[3]}]}
    output.render_status(status)
    out = _shown(capsys)
    assert "[link=https://evil.example]" in out

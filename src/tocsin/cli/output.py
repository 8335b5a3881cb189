"""How the ``tocsin`` verbs print: tables for a person at a terminal, JSON for a program
(``--json``, or whenever the output is piped — so scripts keep reading JSON)."""

from __future__ import annotations

import json
import re
import sys
from typing import Any

import typer

from tocsin.domain import HoldReason

__all__ = ["emit", "json_wanted", "plain", "render_status", "set_json"]

_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")
"""Characters a terminal acts on (escape sequences: a cleared screen, a window title, a link;
C1 controls; bidirectional overrides that reorder what is shown)."""

_forced = False
_MAX_CELL = 60
_SHORT_CELL = 20
"""Cells up to this wide are never shortened (statuses, counts, times without milliseconds)."""


def set_json(value: bool) -> None:
    """``--json`` given on the command line."""
    global _forced
    _forced = value


def _is_terminal() -> bool:
    return sys.stdout.isatty()


def json_wanted() -> bool:
    """JSON when asked for, or when the output is not a terminal."""
    return _forced or not _is_terminal()


def plain(value: Any) -> str:
    """``value`` as inert text for a terminal: control characters shown as escapes
    (``\\x1b``), Rich markup (``[link=…]``) escaped. Every tenant-supplied string goes through
    it before it reaches an admin's terminal."""
    from rich.markup import escape

    text = value if isinstance(value, str) else str(value)
    return escape(_CONTROL.sub(lambda m: json.dumps(m.group())[1:-1], text))


def _cell(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    text = text if len(text) <= _MAX_CELL else text[:_MAX_CELL - 1] + "…"
    return plain(text)


def _is_id(column: str) -> bool:
    return column == "id" or column.endswith("_id")


def _table(rows: list[dict[str, Any]]) -> Any:
    """``rows`` as a table that fits the terminal: ids are never cut (so they can be copied),
    nor short values (a status, a time), nor a column's name; longer text is shortened with
    "…" when the row is too wide."""
    from rich.table import Table

    columns = list(dict.fromkeys(k for row in rows for k in row))
    table = Table(box=None, pad_edge=False, show_lines=False, header_style="bold")
    for column in columns:
        widest = max(len(column), *(len(_cell(row.get(column))) for row in rows))
        keep = _is_id(column) or widest <= _SHORT_CELL
        table.add_column(plain(column), no_wrap=keep, overflow="ellipsis",
                         min_width=widest if keep else len(column))
    for row in rows:
        table.add_row(*(_cell(row.get(c)) for c in columns))
    return table


def emit(value: Any) -> None:
    """Print ``value``: JSON (as before) or a table."""
    if json_wanted():
        typer.echo(json.dumps(value, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    console = Console()
    if isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
        console.print(_table(value))
    elif isinstance(value, dict):
        table = Table("field", "value", show_header=False)
        for key, item in value.items():
            table.add_row(plain(key), _cell(item))
        console.print(table)
    elif isinstance(value, list) and not value:
        console.print("(none)")
    else:
        console.print(plain(value))


def render_status(status: dict[str, Any]) -> None:
    """``tocsin status`` on one screen."""
    if json_wanted():
        typer.echo(json.dumps(status, indent=2, default=str))
        return
    from rich.console import Console
    from rich.table import Table

    def health(part: dict[str, Any] | None) -> str:
        if not part:
            return "[red]unknown[/]"
        age = "never" if part.get("age_s") is None else f"{part['age_s']} s ago"
        mark = "[green]healthy[/]" if part.get("healthy") else "[red]no recent heartbeat[/]"
        return f"{mark} (last beat {age})"

    table = Table(title="Tocsin", show_header=False)
    table.add_row("API", f"[green]{plain(status.get('api'))}[/]")
    table.add_row("store", plain(status.get("store")))
    if status.get("tenant"):
        table.add_row("tenant", plain(status["tenant"]))
    table.add_row("dispatcher", health(status.get("dispatcher")))
    table.add_row("expander", health(status.get("expander")))
    for key, label in (("backlog", "due now (backlog)"), ("due_next_hour", "due next hour"),
                       ("dead", "dead")):
        if key in status:
            table.add_row(label, plain(status[key]))
    halted = status.get("halted_keys") or []
    table.add_row("halted keys", ", ".join(f"{plain(k['tenant'])}/{plain(k['ordering_key'])}"
                                           for k in halted) or "none")
    paused = status.get("paused_channels") or []
    table.add_row("paused channels", ", ".join(f"{plain(p['tenant'])}/{plain(p['name'])}"
                                               for p in paused) or "none")
    if "in_flight" in status:
        table.add_row("in flight", plain(status["in_flight"]))
    held = status.get("held_channels") or []
    table.add_row("held channels", "\n".join(_held_line(h) for h in held) or "none")
    for d in status.get("dispatchers") or []:
        owns = ", ".join(d["buckets"]) or ("none (joining)" if not d["ready"] else "none")
        since = f" since {plain(d['owns_since'])}" if d.get("owns_since") else ""
        table.add_row(f"dispatcher {plain(d['run'])}",
                      f"{plain(d['host'])} pid {d['pid']}, buckets {owns}{since} "
                      f"(last beat {d['age_s']} s ago)")
    Console().print(table)


def _held_line(h: dict[str, Any]) -> str:
    """One held destination of ``tocsin status``, with why it is held."""
    where = f"{plain(h['tenant'])}/{plain(h['name'])}"
    if h["reason"] == HoldReason.OPEN:
        return (f"[red]{where}: breaker open[/] until {plain(h['until'])} after "
                f"{plain(h['failures'])} failures ({plain(h['last_error'])})")
    if h["reason"] == HoldReason.UNDELIVERABLE:
        return f"[red]{where}: undeliverable here[/] ({plain(h['last_error'])})"
    return f"{where}: busy (a dispatcher's queue is full)"

"""The ``tocsin`` command: run the services, and talk to a running API.

``tocsin up`` runs everything on one machine; ``tocsin api`` and ``tocsin dispatcher`` run the
parts separately (many API replicas, one dispatcher query per store). The other verbs are a
thin shell over :class:`tocsin.client.Client`; each group of them is a module of this package.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from typer.core import TyperArgument, TyperGroup, TyperOption

from tocsin.cli import bulk, jobs, ops, policies, schedules, services
from tocsin.cli.apikeys import apikeys_app
from tocsin.cli.audit import audit
from tocsin.cli.channels import channels_app
from tocsin.cli.encryption import encryption_app
from tocsin.cli.output import set_json
from tocsin.cli.recurring import recurring_app

__all__ = ["SECTIONS", "app", "main", "plain_help"]

SECTIONS = {
    "Run Tocsin": ("up", "api", "dispatcher", "ingest", "migrate", "config"),
    "Schedules": ("schedule", "ls", "get", "cancel", "reschedule"),
    "Set up": ("channels", "recurring", "policies", "apikeys", "tenant", "encryption"),
    "Operate": ("status", "stats", "redrive", "keys", "release", "cancel-where",
                "reschedule-where", "audit"),
    "Spark batch jobs": ("import", "bulk", "archive", "report"),
}
"""How ``tocsin --help`` groups the verbs, in the order a newcomer meets them."""


class _PlainArgument(TyperArgument):
    """An argument shown by its name alone, in the usage line and in ``--help``: typer adds
    its type (``channel <str>``) and braces (``{channel}``)."""

    def display_type_rich(self, ctx: Any) -> str | None:
        return None

    def get_usage_pieces(self, ctx: Any) -> list[str]:
        name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
        return [name + ("..." if self.nargs != 1 else "")]


def plain_help(command: Any) -> None:  # typer's own click types
    """Every option and argument of ``command`` and of the verbs under it shown as click and
    argparse show them, by a name (``--payload PAYLOAD``, ``CHANNEL``) or its choices
    (``[text|json]``), not by typer's type placeholders (``<str>``, ``<list[str]>``,
    ``<int range>``), which tell a reader nothing the help does not."""
    for param in command.params:
        if param.metavar is not None or param.name is None:
            continue
        choices = getattr(getattr(param, "type_descriptor", None), "choices", None)
        if choices:
            metavar = f"[{'|'.join(str(getattr(c, 'value', c)) for c in choices)}]"
        else:  # an option's long name (``--format FORMAT``), as argparse shows it
            longs = [opt[2:] for opt in param.opts if opt.startswith("--")]
            metavar = (longs[0] if longs else param.name).replace("-", "_").upper()
        if isinstance(param, TyperArgument):
            param.__class__ = _PlainArgument
            param.metavar = metavar
        elif isinstance(param, TyperOption) and not (param.is_flag or param.count):
            param.metavar = metavar
    for sub in getattr(command, "commands", {}).values():  # a TyperGroup is no click.Group
        plain_help(sub)


class _Sections(TyperGroup):
    """``--help`` lists the verbs by :data:`SECTIONS` (any other under "Other"), each verb's
    options without type placeholders (:func:`plain_help`)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        plain_help(self)

    def format_commands(self, ctx: Any, formatter: Any) -> None:  # typer's own click types
        commands = {name: self.get_command(ctx, name) for name in self.list_commands(ctx)}
        placed = {name for names in SECTIONS.values() for name in names}
        sections = [*SECTIONS.items(), ("Other", tuple(n for n in commands if n not in placed))]
        widest = max(map(len, commands), default=0)  # one column width for every section
        for title, names in sections:
            rows = [(name.ljust(widest), command.get_short_help_str(200)) for name in names
                    if (command := commands.get(name)) is not None and not command.hidden]
            if rows:
                with formatter.section(title):
                    formatter.write_dl(rows)


app = typer.Typer(
    cls=_Sections,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,  # plain help: no "<bool>" after every flag
    help="Tocsin: a durable scheduler of delayed messages.",
)


@app.callback()
def _options(json_out: Annotated[bool, typer.Option(
        "--json", help="Print JSON (the default when the output is piped).")] = False) -> None:
    """Tocsin: a durable scheduler of delayed messages."""
    set_json(json_out)


services.register(app)
schedules.register(app)
app.add_typer(channels_app, name="channels")
app.add_typer(recurring_app, name="recurring")
policies.register(app)
ops.register(app)
bulk.register(app)
jobs.register(app)
app.add_typer(apikeys_app, name="apikeys")
app.add_typer(encryption_app, name="encryption")
app.command("audit")(audit)


def main() -> None:
    """Entry point of the ``tocsin`` console script (whatever it creates is owner-only)."""
    import os

    from tocsin.owner_only import UMASK

    os.umask(UMASK)
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)

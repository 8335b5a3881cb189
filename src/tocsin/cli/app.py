"""The ``tocsin`` command: run the services, and talk to a running API.

``tocsin up`` runs everything on one machine; ``tocsin api`` and ``tocsin dispatcher`` run the
parts separately (many API replicas, one dispatcher query per store). The other verbs are a
thin shell over :class:`tocsin.client.Client`; each group of them is a module of this package.
"""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tocsin.cli import bulk, jobs, ops, policies, schedules, services
from tocsin.cli.apikeys import apikeys_app
from tocsin.cli.channels import channels_app
from tocsin.cli.output import set_json
from tocsin.cli.recurring import recurring_app

__all__ = ["app", "main"]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
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


def main() -> None:
    """Entry point of the ``tocsin`` console script."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)

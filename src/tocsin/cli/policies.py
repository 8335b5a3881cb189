"""``tocsin policies add|ls|rm`` and ``tocsin release``: throttling policies and their
tokens."""

from __future__ import annotations

from typing import Annotated

import typer

from tocsin.cli.common import ApiOpt, call, client_for

__all__ = ["policies_app", "register"]

policies_app = typer.Typer(no_args_is_help=True, help="Throttling policies.")


@policies_app.command("add")
def add(
    name: str,
    max_in_flight: Annotated[int, typer.Option(help="Most deliveries holding a token.")],
    rate: Annotated[float | None, typer.Option(help="Most deliveries started a second.")] = None,
    token_lease: Annotated[str | None, typer.Option(help="Seconds or ISO 8601.")] = None,
    api: ApiOpt = None,
) -> None:
    """Register or change a throttling policy."""
    call(client_for(api).add_policy, name, max_in_flight, rate=rate, token_lease=token_lease)


@policies_app.command("ls")
def list_policies(api: ApiOpt = None) -> None:
    """List policies and the tokens they hold."""
    call(client_for(api).policies)


@policies_app.command("rm")
def remove(name: str, api: ApiOpt = None) -> None:
    """Delete a policy (refused while schedules wait on it)."""
    call(client_for(api).delete_policy, name)


def release(delivery_id: str, api: ApiOpt = None) -> None:
    """Hand a delivery's policy token back (its Tocsin-Delivery-Id)."""
    call(client_for(api).release, delivery_id)


def register(app: typer.Typer) -> None:
    """Add the ``policies`` group and ``release`` to the ``tocsin`` command."""
    app.add_typer(policies_app, name="policies")
    app.command()(release)

"""The ``tocsin`` verbs of an operator: ``status`` and ``stats``, re-drive dead schedules,
halted ordering keys, a tenant's settings."""

from __future__ import annotations

from typing import Annotated

import typer

from tocsin.cli.common import ApiOpt, TenantOpt, answering, call, client_for, span

__all__ = ["keys_app", "register"]

keys_app = typer.Typer(no_args_is_help=True, help="Ordering keys: list halted ones, resume.")


def status(api: ApiOpt = None) -> None:
    """One screen: API, dispatcher and expander health, backlog, due next hour, dead, halted
    keys, paused channels."""
    from tocsin.cli.output import render_status

    with answering():
        render_status(client_for(api).status())


def stats(window: Annotated[str, typer.Option(help="How far back (PT1H, 600).")] = "PT1H",
          ahead: Annotated[str, typer.Option(help="How far ahead due_soon looks.")] = "PT1H",
          tenant: Annotated[str | None, typer.Option(
              help="Schedules of this tenant (admin).")] = None,
          label: Annotated[str | None, typer.Option(
              help="A label selector k=v[,k2=v2]: those schedules' figures only.")] = None,
          api: ApiOpt = None) -> None:
    """Live figures per channel: pending, due soon, finished and lateness in a window."""
    call(client_for(api).stats, window=span(window), ahead=span(ahead), tenant=tenant,
         label=label)


def redrive(
    schedule_id: Annotated[str | None, typer.Argument(help="A DEAD schedule's id.")] = None,
    dead: Annotated[bool, typer.Option("--dead", help="Every DEAD schedule matching the "
                                                      "filters below.")] = False,
    channel: Annotated[str | None, typer.Option()] = None,
    tenant: TenantOpt = None,
    due_from: Annotated[str | None, typer.Option(help="RFC 3339; due at or after.")] = None,
    due_to: Annotated[str | None, typer.Option(help="RFC 3339; due before.")] = None,
    label: Annotated[str | None, typer.Option(help="A label selector: k=v[,k2=v2].")] = None,
    limit: Annotated[int, typer.Option(help="The most to send again.")] = 10_000,
    expired: Annotated[bool, typer.Option(
        "--expired", help="With --dead: the EXPIRED schedules instead of the DEAD ones.")
    ] = False,
    api: ApiOpt = None,
) -> None:
    """Send dead (or expired) schedules again (a new attempt chain; their attempt log is
    kept)."""
    if (schedule_id is None) == (not dead):
        typer.echo("error: give a schedule id, or --dead with filters", err=True)
        raise typer.Exit(2)
    if schedule_id is not None:
        call(lambda: client_for(api).redrive(schedule_id))
    else:
        call(lambda: {"redriven": client_for(api).redrive_dead(
            channel=channel, tenant=tenant, due_from=due_from, due_to=due_to, limit=limit,
            status="EXPIRED" if expired else "DEAD", label=label)})


@keys_app.command("halted")
def keys_halted(api: ApiOpt = None) -> None:
    """List ordering keys halted by a dead schedule."""
    call(client_for(api).halted_keys)


@keys_app.command("resume")
def keys_resume(
    ordering_key: str,
    tenant: Annotated[str | None, typer.Option(help="Admin keys: the key's tenant.")] = None,
    api: ApiOpt = None,
) -> None:
    """Resume a halted ordering key (of your key's tenant)."""
    call(client_for(api).resume_key, ordering_key, tenant)


def tenant(
    name: str,
    durability: Annotated[str | None, typer.Option(help="strict or relaxed.")] = None,
    events: Annotated[str | None, typer.Option(
        help="A channel of the tenant that gets its outcome events.")] = None,
    api: ApiOpt = None,
) -> None:
    """Show a tenant's settings, or set its durability and events channel."""
    client = client_for(api)
    if durability is None and events is None:
        call(client.get_tenant, name)
    else:
        call(client.set_tenant, name, durability=durability or "strict",
             events=events)


def register(app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` command."""
    app.command()(status)
    app.command()(stats)
    app.command()(redrive)
    app.add_typer(keys_app, name="keys")
    app.command()(tenant)

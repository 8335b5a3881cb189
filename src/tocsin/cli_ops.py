"""The ``tocsin`` verbs of an operator: re-drive dead schedules, pause and resume channels."""

from __future__ import annotations

from typing import Annotated, Any

import typer

__all__ = ["register"]

ApiOpt = Annotated[
    str | None, typer.Option("--api", envvar="TOCSIN_API_URL", help="URL of a running Tocsin API.")
]
TenantOpt = Annotated[str | None, typer.Option(help="The tenant (admin keys).")]


def _run(fn: Any) -> None:
    from tocsin import cli

    cli._call(fn)


def _client(api: str | None) -> Any:
    from tocsin import cli

    return cli._client(api)


def redrive(
    schedule_id: Annotated[str | None, typer.Argument(help="A DEAD schedule's id.")] = None,
    dead: Annotated[bool, typer.Option("--dead", help="Every DEAD schedule matching the "
                                                      "filters below.")] = False,
    channel: Annotated[str | None, typer.Option()] = None,
    tenant: TenantOpt = None,
    due_from: Annotated[str | None, typer.Option(help="RFC 3339; due at or after.")] = None,
    due_to: Annotated[str | None, typer.Option(help="RFC 3339; due before.")] = None,
    limit: Annotated[int, typer.Option(help="The most to send again.")] = 10_000,
    api: ApiOpt = None,
) -> None:
    """Send dead schedules again (a new attempt chain; their attempt log is kept)."""
    if (schedule_id is None) == (not dead):
        typer.echo("error: give a schedule id, or --dead with filters", err=True)
        raise typer.Exit(2)
    if schedule_id is not None:
        _run(lambda: _client(api).redrive(schedule_id))
    else:
        _run(lambda: {"redriven": _client(api).redrive_dead(
            channel=channel, tenant=tenant, due_from=due_from, due_to=due_to, limit=limit)})


def channels_pause(name: str, tenant: TenantOpt = None, api: ApiOpt = None) -> None:
    """Pause a channel: its schedules wait (not fail) until it is resumed."""
    _run(lambda: _client(api).pause_channel(name, tenant))


def channels_resume(name: str, tenant: TenantOpt = None, api: ApiOpt = None) -> None:
    """Resume a paused channel."""
    _run(lambda: _client(api).resume_channel(name, tenant))


def channels_paused(api: ApiOpt = None) -> None:
    """List the paused channels."""
    _run(lambda: _client(api).paused_channels())


def status(api: ApiOpt = None) -> None:
    """One screen: API, dispatcher and expander health, backlog, due next hour, dead, halted
    keys, paused channels."""
    from tocsin import cli
    from tocsin.cli_output import render_status
    from tocsin.errors import TocsinError

    try:
        render_status(_client(api).status())
    except TocsinError as exc:
        cli._fail(exc)


def register(app: typer.Typer, channels_app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` command."""
    app.command()(redrive)
    app.command()(status)
    channels_app.command("pause")(channels_pause)
    channels_app.command("resume")(channels_resume)
    channels_app.command("paused")(channels_paused)

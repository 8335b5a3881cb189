"""``tocsin channels add|ls|test|pause|resume|paused``: register channels, try one, and stop
their deliveries for a while."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tocsin.cli.common import ApiOpt, TenantOpt, answering, call, client_for, json_option
from tocsin.cli.output import emit

__all__ = ["channels_app"]

channels_app = typer.Typer(no_args_is_help=True, help="Register and list channels.")


@channels_app.command("add")
def add(
    name: str,
    kind: Annotated[str, typer.Option(
        help="file, webhook, kafka, rabbitmq, sqs, redis_streams, nats, or a plug-in's kind."
    )] = "file",
    config_json: Annotated[str | None, typer.Option("--config", help="Config as JSON.")] = None,
    path: Annotated[str | None, typer.Option(
        help="file: the JSON-lines file, relative to the server's file root.")] = None,
    url: Annotated[str | None, typer.Option(help="webhook: the URL to POST to.")] = None,
    api: ApiOpt = None,
) -> None:
    """Register (or replace) a channel."""
    cfg: dict[str, Any] = json_option(config_json, "--config") if config_json else {}
    if path:  # as given: a relative path lands under the server's first file root
        cfg["path"] = path
    if url:
        cfg["url"] = url
    call(client_for(api).add_channel, name, kind, cfg)


@channels_app.command("ls")
def list_channels(api: ApiOpt = None) -> None:
    """List registered channels."""
    call(client_for(api).channels)


@channels_app.command("test")
def test_channel(name: str, tenant: TenantOpt = None, api: ApiOpt = None) -> None:
    """Send one marked test message through a channel now and print what came of it; exit 1
    unless it was delivered."""
    with answering():
        answer = client_for(api).test_channel(name, tenant)
        emit(answer)
    if not answer["delivered"]:
        raise typer.Exit(1)


@channels_app.command("pause")
def pause(name: str, tenant: TenantOpt = None, api: ApiOpt = None) -> None:
    """Pause a channel: its schedules wait (not fail) until it is resumed."""
    call(lambda: client_for(api).pause_channel(name, tenant))


@channels_app.command("resume")
def resume(name: str, tenant: TenantOpt = None, api: ApiOpt = None) -> None:
    """Resume a paused channel."""
    call(lambda: client_for(api).resume_channel(name, tenant))


@channels_app.command("paused")
def paused(api: ApiOpt = None) -> None:
    """List the paused channels."""
    call(lambda: client_for(api).paused_channels())

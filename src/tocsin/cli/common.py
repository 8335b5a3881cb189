"""What every group of ``tocsin`` verbs shares: the common options, the settings and the client
they build, and how an answer or an error is printed."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tocsin.cli.output import emit
from tocsin.config import Settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from tocsin.client import Client

__all__ = ["ApiOpt", "LogOpt", "MasterOpt", "PortOpt", "StoreOpt", "TenantOpt", "call",
           "client_for", "fail", "json_option", "settings_for", "span"]

ApiOpt = Annotated[
    str | None, typer.Option("--api", envvar="TOCSIN_API_URL", help="URL of a running Tocsin API.")
]
StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL (sqlite:///… or postgresql://…).")
]
MasterOpt = Annotated[str | None, typer.Option("--spark-master", help="Spark master URL.")]
PortOpt = Annotated[int | None, typer.Option("--port", help="API port.")]
LogOpt = Annotated[
    str | None, typer.Option("--log-format", help="text (people) or json (collectors).")
]
TenantOpt = Annotated[str | None, typer.Option(help="The tenant (admin keys).")]


def settings_for(store: str | None = None, master: str | None = None,
                 port: int | None = None, log_format: str | None = None) -> Settings:
    """The settings (environment, file), with the options given on the command line."""
    overrides: dict[str, Any] = {}
    if log_format:
        overrides["log_format"] = log_format
    if store:
        overrides["store"] = store
    if master:
        overrides["spark_master"] = master
    if port is not None:
        overrides["api_port"] = port
    return Settings(**overrides)


def client_for(api: str | None) -> Client:
    """A client of the API at ``api``, or of the one the settings name."""
    from tocsin.client import Client

    configured = Settings()
    return Client(api or f"http://{configured.api_host}:{configured.api_port}")


def fail(exc: Exception) -> NoReturn:
    """Print ``exc`` as one line on stderr and exit 1."""
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Print what a client call answers; a Tocsin error is printed and exits 1."""
    from tocsin.errors import TocsinError

    try:
        emit(fn(*args, **kwargs))
    except TocsinError as exc:
        fail(exc)


def span(value: str) -> float | str:
    """A duration option: seconds as a number, anything else (``PT5M``) as given."""
    return float(value) if value.replace(".", "", 1).isdigit() else value


def json_option(value: str, option: str) -> Any:
    """``value`` parsed as JSON, or exit 1 naming ``option``."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        fail(ValueError(f"{option} is not JSON: {exc}"))

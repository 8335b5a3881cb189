"""What every group of ``tocsin`` verbs shares: the common options, the settings and the client
they build, and how an answer or an error is printed."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tocsin.cli.output import emit
from tocsin.config import Settings

if TYPE_CHECKING:
    from collections.abc import Callable

    from tocsin.client import Client

__all__ = ["ApiOpt", "LogOpt", "MasterOpt", "PortOpt", "StoreOpt", "TenantOpt", "answering",
           "call", "client_for", "fail", "json_option", "settings_for", "span", "unreachable"]

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


def unreachable(exc: Exception) -> str:
    """One line for an API that does not answer: where it was asked, how to start one."""
    try:
        url = exc.request.url  # type: ignore[attr-defined]
        where = f"{url.scheme}://{url.netloc.decode()}"
    except (AttributeError, RuntimeError):
        where = "the API"
    reason = str(exc).split("\n", 1)[0] or type(exc).__name__
    return (f"cannot reach the Tocsin API at {where} ({reason}); start one with `tocsin up`, "
            "or name a running one with --api or TOCSIN_API_URL")


@contextmanager
def answering(flags: Mapping[str, str] | None = None) -> Iterator[None]:
    """Turn a Tocsin error, or an API that does not answer, into one line on stderr and exit
    1; a validation error on a field in ``flags`` names the flag that gave it instead."""
    import httpx

    from tocsin.errors import TocsinError, ValidationError

    try:
        yield
    except ValidationError as exc:
        if flags and exc.field in flags:
            fail(ValueError(f"{flags[exc.field]}: {exc.reason}"))
        fail(exc)
    except TocsinError as exc:
        fail(exc)
    except httpx.TransportError as exc:
        fail(ValueError(unreachable(exc)))


def call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """Print what a client call answers; a Tocsin error, or an API that does not answer, is
    one line on stderr and exit 1."""
    with answering():
        emit(fn(*args, **kwargs))


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86_400}
_SHORT = re.compile(r"(\d+(?:\.\d+)?)([smhd])")


def span(value: str) -> float | str:
    """A duration option: seconds as a number (``90``), a number and a unit (``90s``, ``5m``,
    ``2h``, ``1d``) in seconds, anything else (``PT5M``) as given for the API to read."""
    if value.replace(".", "", 1).isdigit():
        return float(value)
    if short := _SHORT.fullmatch(value.strip()):
        return float(short.group(1)) * _UNITS[short.group(2)]
    return value


def json_option(value: str, option: str) -> Any:
    """``value`` parsed as JSON, or exit 1 naming ``option``."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        fail(ValueError(f"{option} is not JSON: {exc}"))

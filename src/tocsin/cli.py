"""The ``tocsin`` command: run the services, and talk to a running API.

``tocsin up`` runs everything on one machine; ``tocsin api`` and ``tocsin dispatcher`` run the
parts separately (many API replicas, one dispatcher query per store). The other verbs are a
thin shell over :class:`tocsin.client.Client`.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from tocsin import cli_bulk
from tocsin.cli_apikeys import apikeys_app
from tocsin.cli_ops import register as register_ops
from tocsin.cli_output import emit, set_json
from tocsin.config import Settings

if TYPE_CHECKING:
    from tocsin.client import Client

__all__ = ["app", "main"]

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="Tocsin: a durable scheduler of delayed messages.",
)
channels_app = typer.Typer(no_args_is_help=True, help="Register and list channels.")
app.add_typer(channels_app, name="channels")
keys_app = typer.Typer(no_args_is_help=True, help="Ordering keys: list halted ones, resume.")
app.add_typer(keys_app, name="keys")
recurring_app = typer.Typer(no_args_is_help=True,
                            help="Recurring schedules: cron rules in a time zone.")
app.add_typer(recurring_app, name="recurring")
policies_app = typer.Typer(no_args_is_help=True, help="Throttling policies.")
app.add_typer(policies_app, name="policies")
app.add_typer(apikeys_app, name="apikeys")
register_ops(app, channels_app)
cli_bulk.register(app)


@app.callback()
def _options(json_out: Annotated[bool, typer.Option(
        "--json", help="Print JSON (the default when the output is piped).")] = False) -> None:
    """Tocsin: a durable scheduler of delayed messages."""
    set_json(json_out)

StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL (sqlite:///… or postgresql://…).")
]
MasterOpt = Annotated[str | None, typer.Option("--spark-master", help="Spark master URL.")]
PortOpt = Annotated[int | None, typer.Option("--port", help="API port.")]
LogOpt = Annotated[
    str | None, typer.Option("--log-format", help="text (people) or json (collectors).")
]
ApiOpt = Annotated[
    str | None, typer.Option("--api", envvar="TOCSIN_API_URL", help="URL of a running Tocsin API.")
]


def _settings(
    store: str | None = None, master: str | None = None, port: int | None = None,
    log_format: str | None = None,
) -> Settings:
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


def _client(api: str | None) -> Client:
    from tocsin.client import Client

    settings = Settings()
    return Client(api or f"http://{settings.api_host}:{settings.api_port}")


def _print(value: Any) -> None:
    emit(value)


def _fail(exc: Exception) -> NoReturn:
    typer.echo(f"error: {exc}", err=True)
    raise typer.Exit(1)


def _call(fn: Any, *args: Any, **kwargs: Any) -> None:
    """Print what a client call answers; a Tocsin error is printed and exits 1."""
    from tocsin.errors import TocsinError

    try:
        _print(fn(*args, **kwargs))
    except TocsinError as exc:
        _fail(exc)


def _span(value: str) -> float | str:
    """A duration option: seconds as a number, anything else (``PT5M``) as given."""
    return float(value) if value.replace(".", "", 1).isdigit() else value


def _json(value: str, option: str) -> Any:
    """``value`` parsed as JSON, or exit 1 naming ``option``."""
    try:
        return json.loads(value)
    except json.JSONDecodeError as exc:
        _fail(ValueError(f"{option} is not JSON: {exc}"))


@app.command()
def up(store: StoreOpt = None, spark_master: MasterOpt = None, port: PortOpt = None,
       log_format: LogOpt = None) -> None:
    """Run store, API and dispatcher on this machine (the embedded default: SQLite, local Spark)."""
    from tocsin.runner import run_up

    run_up(_settings(store, spark_master, port, log_format))


@app.command()
def api(store: StoreOpt = None, port: PortOpt = None, log_format: LogOpt = None) -> None:
    """Run only the HTTP API (run as many replicas as you like)."""
    from tocsin.runner import run_api

    run_api(_settings(store, None, port, log_format), expect_dispatcher=True)


@app.command()
def dispatcher(store: StoreOpt = None, spark_master: MasterOpt = None,
               log_format: LogOpt = None) -> None:
    """Run only the dispatcher (one Spark Structured Streaming query)."""
    from tocsin.dispatcher.query import run_dispatcher

    run_dispatcher(_settings(store, spark_master, None, log_format))


@app.command("import")
def import_(
    path: Annotated[str, typer.Argument(help="A file, a folder, or any path Spark reads.")],
    fmt: Annotated[str | None, typer.Option("--format", help="json, csv or parquet "
                                            "(default: from the file names).")] = None,
    mapping: Annotated[list[str] | None, typer.Option("--map", help="FIELD=COLUMN: take a "
                                                      "field from a column (repeatable).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Write every row to this tenant (with a "
                                               "tenant key: its own).")] = None,
    rejects: Annotated[str | None, typer.Option(help="Folder for rejected rows.")] = None,
    partitions: Annotated[int | None, typer.Option(min=1, help="Most concurrent writers.")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Import schedules from files as a Spark batch job (docs/pipelines.md)."""
    from tocsin.dispatcher.query import session_for
    from tocsin.errors import TocsinError
    from tocsin.pipelines.bulk_import import run_import
    from tocsin.pipelines.rows import RowShape, SourceFormat, parse_mapping

    settings = _settings(store, spark_master)
    try:
        tenant = _import_tenant(settings, tenant)
        source = SourceFormat.named(fmt) if fmt else SourceFormat.of(path)
        shape = RowShape(format=source, mapping=parse_mapping(mapping or []), tenant=tenant)
        summary = run_import(session_for(settings, app_name="tocsin-import"),
                             path, settings=settings, fmt=source, shape=shape, rejects=rejects,
                             partitions=partitions, show_progress=sys.stdout.isatty())
    except (TocsinError, ValueError) as exc:
        _fail(exc)
    _print(summary.to_dict())


def _import_tenant(settings: Settings, named: str | None) -> str | None:
    """The tenant an import writes to: with ``TOCSIN_API_KEY`` set, the key decides as on the
    API (a tenant key: its own tenant, naming another is refused; read-only: refused); without
    one, the operator (who can open the store anyway) decides, as an admin would."""
    if settings.api_key is None:
        return named
    from tocsin.apikeys import find_key
    from tocsin.domain import Role
    from tocsin.errors import AuthenticationError, ForbiddenError
    from tocsin.stores import open_store

    store = open_store(settings.store_url, buckets=settings.buckets)
    try:
        key = find_key(store, settings.api_key.get_secret_value())
    finally:
        store.close()
    if key is None:
        raise AuthenticationError("TOCSIN_API_KEY is unknown or revoked in this store")
    if key.read_only:
        raise ForbiddenError("key", "a read-only key cannot import")
    if key.role is Role.TENANT:
        if named is not None and named != key.tenant:
            raise ForbiddenError("tenant", f"this key acts for tenant {key.tenant!r} only")
        return key.tenant
    return named


@app.command()
def ingest(
    topic: Annotated[str | None, typer.Option(help="The commands topic.")] = None,
    bootstrap: Annotated[str | None, typer.Option(help="Kafka brokers host:port.")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Apply the Kafka commands topic to the store (a Spark streaming query)."""
    from tocsin.pipelines.ingest import run_ingest

    base = _settings(store, spark_master)
    changes = {k: v for k, v in (("ingest_topic", topic), ("ingest_bootstrap", bootstrap)) if v}
    settings = base.model_copy(update=changes)
    if not settings.ingest_topic:
        _fail(ValueError("no commands topic: give --topic or set TOCSIN_INGEST_TOPIC"))
    run_ingest(settings)


@app.command()
def config() -> None:
    """Print the effective configuration."""
    _print(Settings().summary())


@app.command()
def migrate(store: StoreOpt = None) -> None:
    """Create or upgrade the store's schema, then exit: the middle step of an upgrade, with
    every other Tocsin process stopped (docs/deploy.md#upgrades)."""
    from tocsin import __version__
    from tocsin.errors import TocsinError
    from tocsin.redact import redact_url
    from tocsin.stores import open_store

    settings = _settings(store)
    try:
        opened = open_store(settings.store_url, buckets=settings.buckets)
        try:
            buckets = opened.buckets  # PostgreSQL migrates on first use
            _print({"store": redact_url(settings.store_url), "tocsin": __version__,
                    "schema_version": opened.schema_version, "buckets": buckets})
        finally:
            opened.close()
    except TocsinError as exc:
        _fail(exc)


@app.command()
def schedule(
    channel: str,
    payload: Annotated[str | None, typer.Option(help="JSON payload.")] = None,
    text: Annotated[str | None, typer.Option(help="Text payload.")] = None,
    delay: Annotated[str | None, typer.Option(help="Seconds or ISO 8601 duration (PT5M).")] = None,
    at: Annotated[str | None, typer.Option(help="Due time, RFC 3339 with offset.")] = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
    ordering_key: Annotated[str | None, typer.Option(help="Ordering key.")] = None,
    policy: Annotated[str | None, typer.Option(help="Throttling policy.")] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="Header NAME=VALUE (repeatable).")
    ] = None,
    api: ApiOpt = None,
) -> None:
    """Schedule one message."""
    headers = dict(h.split("=", 1) for h in header or [])
    body: dict[str, Any] = {"headers": headers, "key": key, "ordering_key": ordering_key,
                            "policy": policy}
    if payload is not None:
        body["payload"] = _json(payload, "--payload")
    if text is not None:
        body["payload_text"] = text
    if delay is not None:
        body["delay"] = _span(delay)
    if at is not None:
        body["due_at"] = at
    _call(_client(api).schedule, channel, **body)


@app.command()
def reschedule(
    schedule_id: str,
    payload: Annotated[str | None, typer.Option(help="New JSON payload.")] = None,
    delay: Annotated[str | None, typer.Option(help="New delay from now (seconds or PT5M).")] = None,
    at: Annotated[str | None, typer.Option(help="New due time, RFC 3339 with offset.")] = None,
    api: ApiOpt = None,
) -> None:
    """Change a pending schedule's due time or payload (refused once it fires)."""
    changes: dict[str, Any] = {"due_at": at}
    if delay is not None:
        changes["delay"] = _span(delay)
    if payload is not None:
        changes["payload"] = _json(payload, "--payload")
    _call(_client(api).reschedule, schedule_id, **changes)


@keys_app.command("halted")
def keys_halted(api: ApiOpt = None) -> None:
    """List ordering keys halted by a dead schedule."""
    _call(_client(api).halted_keys)


@keys_app.command("resume")
def keys_resume(
    ordering_key: str,
    tenant: Annotated[str | None, typer.Option(help="Admin keys: the key's tenant.")] = None,
    api: ApiOpt = None,
) -> None:
    """Resume a halted ordering key (of your key's tenant)."""
    _call(_client(api).resume_key, ordering_key, tenant)


@app.command()
def cancel(schedule_id: str, api: ApiOpt = None) -> None:
    """Cancel a schedule (refused when it is already firing or done)."""
    _call(_client(api).cancel, schedule_id)


@app.command()
def get(schedule_id: str, api: ApiOpt = None) -> None:
    """Show one schedule and its deliveries."""
    client = _client(api)
    _call(lambda: {"schedule": client.get(schedule_id),
                   "deliveries": client.deliveries(schedule_id)})


@app.command("ls")
def list_schedules(
    status: Annotated[str | None, typer.Option(help="PENDING, DELIVERED, CANCELLED, DEAD…")] = None,
    channel: Annotated[str | None, typer.Option()] = None,
    key: Annotated[str | None, typer.Option(help="The idempotency key it was created by.")] = None,
    limit: Annotated[int, typer.Option()] = 50,
    api: ApiOpt = None,
) -> None:
    """List schedules."""
    from itertools import islice

    _call(lambda: list(islice(_client(api).list(status=status, channel=channel, key=key),
                              limit)))


@channels_app.command("add")
def channels_add(
    name: str,
    kind: Annotated[str, typer.Option(help="file, webhook, kafka or rabbitmq.")] = "file",
    config_json: Annotated[str | None, typer.Option("--config", help="Config as JSON.")] = None,
    path: Annotated[str | None, typer.Option(
        help="file: the JSON-lines file, relative to the server's file root.")] = None,
    url: Annotated[str | None, typer.Option(help="webhook: the URL to POST to.")] = None,
    api: ApiOpt = None,
) -> None:
    """Register (or replace) a channel."""
    cfg: dict[str, Any] = _json(config_json, "--config") if config_json else {}
    if path:  # as given: a relative path lands under the server's first file root
        cfg["path"] = path
    if url:
        cfg["url"] = url
    _call(_client(api).add_channel, name, kind, cfg)


@channels_app.command("ls")
def channels_ls(api: ApiOpt = None) -> None:
    """List registered channels."""
    _call(_client(api).channels)


@recurring_app.command("add")
def recurring_add(
    cron: Annotated[str, typer.Argument(help='5 fields, or 6 with seconds: "30 2 * * *".')],
    channel: Annotated[str, typer.Option(help="A registered channel.")],
    payload: Annotated[str, typer.Option(help="The payload as JSON.")] = "null",
    timezone: Annotated[str, typer.Option(help="IANA time zone.")] = "UTC",
    count: Annotated[int, typer.Option(help="Messages per firing.")] = 1,
    stagger: Annotated[str | None, typer.Option(help="Spread them over: 30, PT5M.")] = None,
    misfire: Annotated[str, typer.Option(help="fire_once, fire_all or skip.")] = "fire_once",
    policy: Annotated[str | None, typer.Option(help="A throttling policy.")] = None,
    api: ApiOpt = None,
) -> None:
    """Create a recurring schedule."""
    _call(_client(api).add_recurring, cron, channel, _json(payload, "--payload"),
          timezone=timezone, count=count, stagger=stagger, misfire=misfire, policy=policy)


@recurring_app.command("ls")
def recurring_ls(api: ApiOpt = None) -> None:
    """List recurring schedules (the first 1000)."""
    _call(lambda: _client(api).list_recurring(limit=1000)["items"])


@recurring_app.command("get")
def recurring_get(recurring_id: str, api: ApiOpt = None) -> None:
    """Show a recurring schedule and its recent firings."""
    client = _client(api)
    _call(lambda: {"recurring": client.get_recurring(recurring_id),
                   "firings": client.firings(recurring_id)})


@recurring_app.command("next")
def recurring_next(recurring_id: str, n: int = 10, api: ApiOpt = None) -> None:
    """The next firings, in the zone and in UTC."""
    _call(_client(api).next_firings, recurring_id, n)


@recurring_app.command("pause")
def recurring_pause(recurring_id: str, api: ApiOpt = None) -> None:
    """Pause a recurring schedule."""
    _call(_client(api).pause_recurring, recurring_id)


@recurring_app.command("resume")
def recurring_resume(recurring_id: str, api: ApiOpt = None) -> None:
    """Resume a paused recurring schedule."""
    _call(_client(api).resume_recurring, recurring_id)


@recurring_app.command("rm")
def recurring_rm(recurring_id: str, api: ApiOpt = None) -> None:
    """Delete a recurring schedule (its firings still ahead are cancelled)."""
    _call(_client(api).delete_recurring, recurring_id)


@policies_app.command("add")
def policies_add(
    name: str,
    max_in_flight: Annotated[int, typer.Option(help="Most deliveries holding a token.")],
    rate: Annotated[float | None, typer.Option(help="Most deliveries started a second.")] = None,
    token_lease: Annotated[str | None, typer.Option(help="Seconds or ISO 8601.")] = None,
    api: ApiOpt = None,
) -> None:
    """Register or change a throttling policy."""
    _call(_client(api).add_policy, name, max_in_flight, rate=rate, token_lease=token_lease)


@policies_app.command("ls")
def policies_ls(api: ApiOpt = None) -> None:
    """List policies and the tokens they hold."""
    _call(_client(api).policies)


@policies_app.command("rm")
def policies_rm(name: str, api: ApiOpt = None) -> None:
    """Delete a policy (refused while schedules wait on it)."""
    _call(_client(api).delete_policy, name)


@app.command()
def tenant(
    name: str,
    durability: Annotated[str | None, typer.Option(help="strict or relaxed.")] = None,
    api: ApiOpt = None,
) -> None:
    """Show a tenant's settings, or set its durability."""
    client = _client(api)
    if durability is None:
        _call(client.get_tenant, name)
    else:
        _call(client.set_tenant, name, durability=durability)


@app.command()
def release(delivery_id: str, api: ApiOpt = None) -> None:
    """Hand a delivery's policy token back (its Tocsin-Delivery-Id)."""
    _call(_client(api).release, delivery_id)


def main() -> None:
    """Entry point of the ``tocsin`` console script."""
    try:
        app()
    except KeyboardInterrupt:
        sys.exit(130)

"""``tocsin up``, ``api``, ``dispatcher``, ``ingest``, ``migrate`` and ``config``: run Tocsin's
parts, upgrade the store, and show the configuration they run with."""

from __future__ import annotations

from typing import Annotated

import typer

from tocsin.cli.common import LogOpt, MasterOpt, PortOpt, StoreOpt, fail, settings_for
from tocsin.cli.output import emit
from tocsin.config import Settings

__all__ = ["api", "config", "dispatcher", "ingest", "migrate", "register", "up"]


def up(store: StoreOpt = None, spark_master: MasterOpt = None, port: PortOpt = None,
       log_format: LogOpt = None) -> None:
    """Run store, API and dispatcher on this machine (the embedded default: SQLite, local Spark)."""
    from tocsin.cli.runner import run_up

    run_up(settings_for(store, spark_master, port, log_format))


def api(store: StoreOpt = None, port: PortOpt = None, log_format: LogOpt = None) -> None:
    """Run only the HTTP API (run as many replicas as you like)."""
    from tocsin.cli.runner import run_api

    run_api(settings_for(store, None, port, log_format), expect_dispatcher=True)


def dispatcher(store: StoreOpt = None, spark_master: MasterOpt = None,
               log_format: LogOpt = None) -> None:
    """Run only the dispatcher (one Spark Structured Streaming query)."""
    from tocsin.dispatcher.query import run_dispatcher

    run_dispatcher(settings_for(store, spark_master, None, log_format))


def ingest(
    topic: Annotated[str | None, typer.Option(help="The commands topic.")] = None,
    bootstrap: Annotated[str | None, typer.Option(help="Kafka brokers host:port.")] = None,
    tenant: Annotated[str | None, typer.Option(
        help="The one tenant the topic's commands act in (TOCSIN_INGEST_TENANT, default "
             "default).")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Apply the Kafka commands topic to the store (a Spark streaming query), in one tenant."""
    from tocsin.domain import check_tenant
    from tocsin.errors import ValidationError
    from tocsin.pipelines.ingest import run_ingest

    base = settings_for(store, spark_master)
    changes = {k: v for k, v in (("ingest_topic", topic), ("ingest_bootstrap", bootstrap),
                                 ("ingest_tenant", tenant)) if v}
    settings = base.model_copy(update=changes)
    try:
        check_tenant(settings.ingest_tenant, "tenant")
    except ValidationError as exc:
        fail(exc)
    if not settings.ingest_topic:
        fail(ValueError("no commands topic: give --topic or set TOCSIN_INGEST_TOPIC"))
    run_ingest(settings)


def migrate(store: StoreOpt = None) -> None:
    """Create or upgrade the store's schema, then exit: the middle step of an upgrade, with
    every other Tocsin process stopped (docs/deploy.md#upgrades)."""
    from tocsin import __version__
    from tocsin.errors import TocsinError
    from tocsin.redact import redact_url
    from tocsin.stores import open_store

    settings = settings_for(store)
    try:
        opened = open_store(settings.store_url, buckets=settings.buckets)
        try:
            buckets = opened.buckets  # PostgreSQL migrates on first use
            emit({"store": redact_url(settings.store_url), "tocsin": __version__,
                  "schema_version": opened.schema_version, "buckets": buckets})
        finally:
            opened.close()
    except TocsinError as exc:
        fail(exc)


def config() -> None:
    """Print the effective configuration."""
    emit(Settings().summary())


def register(app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` command."""
    app.command()(up)
    app.command()(api)
    app.command()(dispatcher)
    app.command()(ingest)
    app.command()(migrate)
    app.command()(config)

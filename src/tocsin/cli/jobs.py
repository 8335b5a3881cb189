"""The Spark batch jobs on the store: ``tocsin import``, ``archive`` and ``report``
(docs/pipelines.md)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Annotated, Any

import typer

from tocsin.cli.common import MasterOpt, StoreOpt, fail, settings_for
from tocsin.cli.output import emit, json_wanted, plain

if TYPE_CHECKING:
    from zoneinfo import ZoneInfo

    from tocsin.config import Settings

__all__ = ["archive", "import_schedules", "import_tenant", "register", "report"]


def import_schedules(
    path: Annotated[str, typer.Argument(help="A file, a folder, or any path Spark reads.")],
    fmt: Annotated[str | None, typer.Option("--format", help="json, csv or parquet "
                                            "(default: from the file names).")] = None,
    mapping: Annotated[list[str] | None, typer.Option("--map", help="FIELD=COLUMN: take a "
                                                      "field from a column (repeatable).")] = None,
    tenant: Annotated[str | None, typer.Option(help="Write every row to this tenant (with a "
                                               "tenant key: its own).")] = None,
    rejects: Annotated[str | None, typer.Option(help="Folder for rejected rows.")] = None,
    partitions: Annotated[int | None, typer.Option(min=1, help="Most concurrent writers.")] = None,
    zone: Annotated[str | None, typer.Option(
        help="Read due times without an offset (a naive timestamp column, text without Z or "
             "+hh:mm) as wall-clock times in this IANA zone, e.g. Europe/Berlin or UTC "
             "(default: refuse them, as the API does).")] = None,
    recurring: Annotated[bool, typer.Option(
        "--recurring", help="Each line is a recurring rule (the fields of POST /v1/recurring: "
                            "cron or every, jitter...), applied without Spark.")] = False,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Import schedules from files as a Spark batch job, or recurring rules from JSON lines
    (docs/pipelines.md)."""
    from tocsin.errors import TocsinError
    from tocsin.pipelines.bulk_import import run_import
    from tocsin.pipelines.rows import RowShape, SourceFormat, parse_mapping
    from tocsin.spark.session import session_for

    settings = settings_for(store, spark_master)
    try:
        wall_zone = import_zone(zone)  # bad input refused before the store is opened
        tenant = import_tenant(settings, tenant)
        if recurring:
            from tocsin.pipelines.rule_import import import_rules

            if fmt not in (None, "json") or mapping or zone:
                raise ValueError("--recurring reads JSON lines: no --format other than json, "
                                 "no --map, no --zone (a rule has its own timezone)")
            emit(import_rules(path, settings=settings, tenant=tenant))
            return
        source = SourceFormat.named(fmt) if fmt else SourceFormat.of(path)
        shape = RowShape(format=source, mapping=parse_mapping(mapping or []), tenant=tenant,
                         zone=wall_zone)
        summary = run_import(session_for(settings, app_name="tocsin-import"),
                             path, settings=settings, fmt=source, shape=shape, rejects=rejects,
                             partitions=partitions, show_progress=sys.stdout.isatty())
    except (TocsinError, ValueError) as exc:
        fail(exc)
    emit_import(summary.to_dict())


def emit_import(summary: dict[str, Any]) -> None:
    """An import's summary; at a terminal, each field rows were rejected on gets a line of
    its own under the table, with one reason whole (a table cell cuts it)."""
    if json_wanted() or not summary.get("rejected_by_field"):
        emit(summary)
        return
    why = summary.pop("rejected_by_field")
    emit(summary)
    for name, refused in why.items():
        typer.echo(f"rejected on {plain(name)}: {refused['rows']:,} rows, e.g. "
                   f"{plain(refused['e.g.'])}")


def import_zone(name: str | None) -> ZoneInfo | None:
    """The zone ``--zone`` names (None: none given); ValueError naming the option."""
    from tocsin.domain.cron import iana_zone
    from tocsin.errors import ValidationError

    if name is None:
        return None
    try:
        return iana_zone(name)
    except ValidationError as exc:
        raise ValueError(f"--zone: {exc.reason}") from None


def import_tenant(settings: Settings, named: str | None) -> str | None:
    """The tenant an import writes to: with ``TOCSIN_API_KEY`` set, the key decides as on the
    API (a tenant key: its own tenant, naming another is refused; read-only: refused); without
    one, the operator (who can open the store anyway) decides, as an admin would."""
    if settings.api_key is None:
        return named
    from tocsin.apikeys.tokens import find_key
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


def archive(
    partitions: Annotated[int | None, typer.Option(
        min=1, help="Spark tasks per round (spans of finish time; default: Spark's "
                    "parallelism).")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Move finished schedules older than the retention to Parquet, then delete them from
    the store (a Spark job; docs/pipelines.md)."""
    from tocsin.errors import TocsinError
    from tocsin.pipelines.archive import run_archive
    from tocsin.spark.session import session_for

    settings = settings_for(store, spark_master)
    try:
        summary = run_archive(session_for(settings, app_name="tocsin-archive"),
                              settings=settings, partitions=partitions)
    except TocsinError as exc:
        fail(exc)
    emit(summary)


def report(
    since: Annotated[str, typer.Option(help="How far back: 7d, 12h, 90m, or seconds.")] = "7d",
    sla: Annotated[float, typer.Option(min=0, help="Lateness (seconds) above which a "
                                       "delivery misses the SLA.")] = 60.0,
    out: Annotated[str | None, typer.Option(help="Folder for report.html and report.json "
                                            "(default: home/reports/report-<ms>).")] = None,
    partitions: Annotated[int | None, typer.Option(
        min=1, help="Spark partitions (time slices).")] = None,
    label: Annotated[str | None, typer.Option(
        help="A label selector k=v[,k2=v2]: the figures of the schedules carrying it "
             "(and of their attempts).")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Delivery analytics over the store and the archive: per tenant, channel and hour
    (a Spark job; an HTML page with plots and the same figures as JSON)."""
    from tocsin.clock import SystemClock
    from tocsin.errors import TocsinError
    from tocsin.pipelines.report import run_report
    from tocsin.spark.session import session_for

    settings = settings_for(store, spark_master)
    now = SystemClock().now_ms()
    folder = out or str(settings.home / "reports" / f"report-{now}")
    try:
        since_ms = _since_ms(since)  # before Spark starts
        if label is not None:
            from tocsin.domain.labels import parse_selector

            parse_selector(label)  # a bad selector is refused before Spark starts too
        figures = run_report(session_for(settings, app_name="tocsin-report"),
                             settings=settings, since_ms=since_ms,
                             sla_ms=int(sla * 1000), out_dir=folder, partitions=partitions,
                             label=label)
    except TocsinError as exc:
        fail(exc)
    emit({"report": f"{folder}/report.html", "json": f"{folder}/report.json",
                "rows": len(figures["hours"]), "channels": len(figures["totals"]),
                "seconds": figures["seconds"]})


def _since_ms(value: str) -> int:
    """``7d``, ``12h``, ``90m``, ``30s`` or seconds, in milliseconds."""
    from tocsin.errors import ValidationError

    units = {"d": 86_400_000, "h": 3_600_000, "m": 60_000, "s": 1000}
    text = value.strip().lower()
    unit = units.get(text[-1:])
    number = text[:-1] if unit else text
    try:
        ms = int(float(number) * (unit or 1000))
    except (ValueError, OverflowError):
        raise ValidationError("since", f"{value!r} is not like 7d, 12h, 90m or 3600") from None
    if ms <= 0:
        raise ValidationError("since", "must be positive")
    return ms


def register(app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` command."""
    app.command("import")(import_schedules)
    app.command()(archive)
    app.command()(report)

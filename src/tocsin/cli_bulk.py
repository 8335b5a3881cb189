"""The ``tocsin`` verbs for changes by predicate and the live figures: ``tocsin bulk cancel|
reschedule`` (a Spark job straight on the store, for millions), ``tocsin cancel-where`` and
``tocsin reschedule-where`` (through the API, bounded by ``--limit``) and ``tocsin stats``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

__all__ = ["bulk_app", "register"]

bulk_app = typer.Typer(no_args_is_help=True, help="Cancel or reschedule by predicate as a "
                       "Spark batch job on the store (docs/pipelines.md).")

ApiOpt = Annotated[
    str | None, typer.Option("--api", envvar="TOCSIN_API_URL", help="URL of a running Tocsin API.")
]
StoreOpt = Annotated[
    str | None, typer.Option("--store", help="Store URL (sqlite:///… or postgresql://…).")
]
MasterOpt = Annotated[str | None, typer.Option("--spark-master", help="Spark master URL.")]
Channel = Annotated[str | None, typer.Option(help="Schedules of this channel.")]
Tenant = Annotated[str | None, typer.Option(help="Schedules of this tenant (admin).")]
KeyPrefix = Annotated[str | None, typer.Option(help="Keys starting with it (campaign-7/).")]
OrderingKey = Annotated[str | None, typer.Option(help="Schedules of this ordering key.")]
RecurringId = Annotated[str | None, typer.Option("--recurring",
                                                 help="Firings of this recurring schedule.")]
DueFrom = Annotated[str | None, typer.Option(help="RFC 3339: due at or after it.")]
DueTo = Annotated[str | None, typer.Option(help="RFC 3339: due before it.")]
DueAt = Annotated[str | None, typer.Option("--at", help="New due time (RFC 3339).")]
Shift = Annotated[str | None, typer.Option(help="Move each by this much (3600, PT1H, -PT5M).")]
Limit = Annotated[int, typer.Option(help="The most schedules this call looks at.")]


@dataclass(frozen=True)
class _Filters:
    channel: str | None
    tenant: str | None
    key_prefix: str | None
    ordering_key: str | None
    recurring_id: str | None
    due_from: str | None
    due_to: str | None

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def selection(self) -> Any:
        from tocsin.api.parsing import parse_instant
        from tocsin.domain import Selection

        return Selection(tenant=self.tenant, channel=self.channel, key_prefix=self.key_prefix,
                         ordering_key=self.ordering_key, recurring_id=self.recurring_id,
                         due_from_ms=parse_instant(self.due_from, "due_from")
                         if self.due_from else None,
                         due_to_ms=parse_instant(self.due_to, "due_to") if self.due_to else None)


def _spark_job(op: str, filters: _Filters, store: str | None, master: str | None,
               partitions: int | None, at: str | None = None, shift: str | None = None) -> None:
    from tocsin import cli
    from tocsin.api.bulk import shift_ms
    from tocsin.api.parsing import parse_instant
    from tocsin.dispatcher.query import session_for
    from tocsin.errors import TocsinError
    from tocsin.pipelines.bulk_change import BulkOp, run_bulk_change

    settings = cli._settings(store, master)
    try:
        selection = filters.selection()
        summary = run_bulk_change(
            session_for(settings, app_name=f"tocsin-bulk-{op}"), BulkOp(op),
            selection, settings=settings, partitions=partitions,
            due_ms=parse_instant(at, "due_at") if at else None,
            shift_ms=None if shift is None else shift_ms(cli._span(shift)))
    except TocsinError as exc:
        cli._fail(exc)
    cli._print(summary)


@bulk_app.command("cancel")
def bulk_cancel(channel: Channel = None, tenant: Tenant = None, key_prefix: KeyPrefix = None,
                ordering_key: OrderingKey = None, recurring_id: RecurringId = None,
                due_from: DueFrom = None, due_to: DueTo = None,
                partitions: Annotated[int | None, typer.Option(
                    min=1, help="Spark partitions (bucket ranges).")] = None,
                store: StoreOpt = None, spark_master: MasterOpt = None) -> None:
    """Cancel every waiting schedule matching the filters (a Spark job on the store)."""
    _spark_job("cancel", _Filters(channel, tenant, key_prefix, ordering_key, recurring_id,
                                  due_from, due_to), store, spark_master, partitions)


@bulk_app.command("reschedule")
def bulk_reschedule(channel: Channel = None, tenant: Tenant = None,
                    key_prefix: KeyPrefix = None, ordering_key: OrderingKey = None,
                    recurring_id: RecurringId = None, due_from: DueFrom = None,
                    due_to: DueTo = None, at: DueAt = None, shift: Shift = None,
                    partitions: Annotated[int | None, typer.Option(
                        min=1, help="Spark partitions (bucket ranges).")] = None,
                    store: StoreOpt = None, spark_master: MasterOpt = None) -> None:
    """Move every waiting schedule matching the filters to --at, or by --shift."""
    _spark_job("reschedule", _Filters(channel, tenant, key_prefix, ordering_key, recurring_id,
                                      due_from, due_to), store, spark_master, partitions,
               at=at, shift=shift)


def cancel_where(channel: Channel = None, tenant: Tenant = None, key_prefix: KeyPrefix = None,
                 ordering_key: OrderingKey = None, recurring_id: RecurringId = None,
                 due_from: DueFrom = None, due_to: DueTo = None, limit: Limit = 10_000,
                 api: ApiOpt = None) -> None:
    """Cancel up to --limit waiting schedules matching the filters, through the API."""
    from tocsin import cli

    filters = _Filters(channel, tenant, key_prefix, ordering_key, recurring_id, due_from,
                       due_to)
    cli._call(cli._client(api).cancel_where, limit=limit, **filters.given())


def reschedule_where(channel: Channel = None, tenant: Tenant = None,
                     key_prefix: KeyPrefix = None, ordering_key: OrderingKey = None,
                     recurring_id: RecurringId = None, due_from: DueFrom = None,
                     due_to: DueTo = None, at: DueAt = None, shift: Shift = None,
                     limit: Limit = 10_000, api: ApiOpt = None) -> None:
    """Move up to --limit waiting schedules matching the filters to --at or by --shift."""
    from tocsin import cli

    filters = _Filters(channel, tenant, key_prefix, ordering_key, recurring_id, due_from,
                       due_to)
    cli._call(cli._client(api).reschedule_where, limit=limit, due_at=at,
              shift=None if shift is None else cli._span(shift), **filters.given())


def stats(window: Annotated[str, typer.Option(help="How far back (PT1H, 600).")] = "PT1H",
          ahead: Annotated[str, typer.Option(help="How far ahead due_soon looks.")] = "PT1H",
          tenant: Tenant = None, api: ApiOpt = None) -> None:
    """Live figures per channel: pending, due soon, finished and lateness in a window."""
    from tocsin import cli

    cli._call(cli._client(api).stats, window=cli._span(window), ahead=cli._span(ahead),
              tenant=tenant)


def archive(
    partitions: Annotated[int | None, typer.Option(
        min=1, help="Spark tasks per round (spans of finish time; default: Spark's "
                    "parallelism).")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Move finished schedules older than the retention to Parquet, then delete them from
    the store (a Spark job; docs/pipelines.md)."""
    from tocsin import cli
    from tocsin.dispatcher.query import session_for
    from tocsin.errors import TocsinError
    from tocsin.pipelines.archive import run_archive

    settings = cli._settings(store, spark_master)
    try:
        summary = run_archive(session_for(settings, app_name="tocsin-archive"),
                              settings=settings, partitions=partitions)
    except TocsinError as exc:
        cli._fail(exc)
    cli._print(summary)


def report(
    since: Annotated[str, typer.Option(help="How far back: 7d, 12h, 90m, or seconds.")] = "7d",
    sla: Annotated[float, typer.Option(min=0, help="Lateness (seconds) above which a "
                                       "delivery misses the SLA.")] = 60.0,
    out: Annotated[str | None, typer.Option(help="Folder for report.html and report.json "
                                            "(default: home/reports/report-<ms>).")] = None,
    partitions: Annotated[int | None, typer.Option(
        min=1, help="Spark partitions (time slices).")] = None,
    store: StoreOpt = None, spark_master: MasterOpt = None,
) -> None:
    """Delivery analytics over the store and the archive: per tenant, channel and hour
    (a Spark job; an HTML page with plots and the same figures as JSON)."""
    from tocsin import cli
    from tocsin.clock import SystemClock
    from tocsin.dispatcher.query import session_for
    from tocsin.errors import TocsinError
    from tocsin.pipelines.report import run_report

    settings = cli._settings(store, spark_master)
    now = SystemClock().now_ms()
    folder = out or str(settings.home / "reports" / f"report-{now}")
    try:
        since_ms = _since_ms(since)  # before Spark starts
        figures = run_report(session_for(settings, app_name="tocsin-report"),
                             settings=settings, since_ms=since_ms,
                             sla_ms=int(sla * 1000), out_dir=folder, partitions=partitions)
    except TocsinError as exc:
        cli._fail(exc)
    cli._print({"report": f"{folder}/report.html", "json": f"{folder}/report.json",
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
    """Add these verbs to the ``tocsin`` application."""
    app.add_typer(bulk_app, name="bulk")
    app.command("cancel-where")(cancel_where)
    app.command("reschedule-where")(reschedule_where)
    app.command("stats")(stats)
    app.command("archive")(archive)
    app.command("report")(report)

"""The ``tocsin`` verbs for changes by predicate: ``tocsin bulk cancel|reschedule`` (a Spark
job straight on the store, for millions), ``tocsin cancel-where`` and ``tocsin
reschedule-where`` (through the API, bounded by ``--limit``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import typer

from tocsin.cli.common import (
    ApiOpt,
    MasterOpt,
    StoreOpt,
    call,
    client_for,
    fail,
    settings_for,
    span,
)
from tocsin.cli.output import emit

__all__ = ["bulk_app", "cancel_where", "register", "reschedule_where"]

bulk_app = typer.Typer(no_args_is_help=True, help="Cancel or reschedule by predicate as a "
                       "Spark batch job on the store (docs/pipelines.md).")

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
Label = Annotated[str | None, typer.Option(help="A label selector: k=v[,k2=v2], every pair "
                                                "must match.")]


@dataclass(frozen=True)
class _Filters:
    channel: str | None
    tenant: str | None
    key_prefix: str | None
    ordering_key: str | None
    recurring_id: str | None
    due_from: str | None
    due_to: str | None
    label: str | None = None

    def given(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if v is not None}

    def selection(self) -> Any:
        from tocsin.domain import Selection
        from tocsin.domain.labels import parse_selector
        from tocsin.validation.parsing import parse_instant

        return Selection(tenant=self.tenant, channel=self.channel, key_prefix=self.key_prefix,
                         ordering_key=self.ordering_key, recurring_id=self.recurring_id,
                         due_from_ms=parse_instant(self.due_from, "due_from")
                         if self.due_from else None,
                         due_to_ms=parse_instant(self.due_to, "due_to") if self.due_to else None,
                         labels=parse_selector(self.label))


def _spark_job(op: str, filters: _Filters, store: str | None, master: str | None,
               partitions: int | None, at: str | None = None, shift: str | None = None) -> None:
    from tocsin.api.bulk import shift_ms
    from tocsin.errors import TocsinError
    from tocsin.pipelines.bulk_change import BulkOp, run_bulk_change
    from tocsin.spark.session import session_for
    from tocsin.validation.parsing import parse_instant

    settings = settings_for(store, master)
    try:
        selection = filters.selection()
        summary = run_bulk_change(
            session_for(settings, app_name=f"tocsin-bulk-{op}"), BulkOp(op),
            selection, settings=settings, partitions=partitions,
            due_ms=parse_instant(at, "due_at") if at else None,
            shift_ms=None if shift is None else shift_ms(span(shift)))
    except TocsinError as exc:
        fail(exc)
    emit(summary)


@bulk_app.command("cancel")
def bulk_cancel(channel: Channel = None, tenant: Tenant = None, key_prefix: KeyPrefix = None,
                ordering_key: OrderingKey = None, recurring_id: RecurringId = None,
                due_from: DueFrom = None, due_to: DueTo = None, label: Label = None,
                partitions: Annotated[int | None, typer.Option(
                    min=1, help="Spark partitions (bucket ranges).")] = None,
                store: StoreOpt = None, spark_master: MasterOpt = None) -> None:
    """Cancel every waiting schedule matching the filters (a Spark job on the store)."""
    _spark_job("cancel", _Filters(channel, tenant, key_prefix, ordering_key, recurring_id,
                                  due_from, due_to, label), store, spark_master, partitions)


@bulk_app.command("reschedule")
def bulk_reschedule(channel: Channel = None, tenant: Tenant = None,
                    key_prefix: KeyPrefix = None, ordering_key: OrderingKey = None,
                    recurring_id: RecurringId = None, due_from: DueFrom = None,
                    due_to: DueTo = None, at: DueAt = None, shift: Shift = None,
                    label: Label = None,
                    partitions: Annotated[int | None, typer.Option(
                        min=1, help="Spark partitions (bucket ranges).")] = None,
                    store: StoreOpt = None, spark_master: MasterOpt = None) -> None:
    """Move every waiting schedule matching the filters to --at, or by --shift."""
    _spark_job("reschedule", _Filters(channel, tenant, key_prefix, ordering_key, recurring_id,
                                      due_from, due_to, label), store, spark_master,
               partitions,
               at=at, shift=shift)


def cancel_where(channel: Channel = None, tenant: Tenant = None, key_prefix: KeyPrefix = None,
                 ordering_key: OrderingKey = None, recurring_id: RecurringId = None,
                 due_from: DueFrom = None, due_to: DueTo = None, label: Label = None,
                 limit: Limit = 10_000,
                 api: ApiOpt = None) -> None:
    """Cancel up to --limit waiting schedules matching the filters, through the API."""
    filters = _Filters(channel, tenant, key_prefix, ordering_key, recurring_id, due_from,
                       due_to, label)
    call(client_for(api).cancel_where, limit=limit, **filters.given())


def reschedule_where(channel: Channel = None, tenant: Tenant = None,
                     key_prefix: KeyPrefix = None, ordering_key: OrderingKey = None,
                     recurring_id: RecurringId = None, due_from: DueFrom = None,
                     due_to: DueTo = None, at: DueAt = None, shift: Shift = None,
                     label: Label = None, limit: Limit = 10_000, api: ApiOpt = None) -> None:
    """Move up to --limit waiting schedules matching the filters to --at or by --shift."""
    filters = _Filters(channel, tenant, key_prefix, ordering_key, recurring_id, due_from,
                       due_to, label)
    call(client_for(api).reschedule_where, limit=limit, due_at=at,
              shift=None if shift is None else span(shift), **filters.given())


def register(app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` application."""
    app.add_typer(bulk_app, name="bulk")
    app.command("cancel-where")(cancel_where)
    app.command("reschedule-where")(reschedule_where)

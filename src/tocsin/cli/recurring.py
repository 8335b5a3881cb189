"""``tocsin recurring add|ls|get|next|pause|resume|rm``: cron rules in a time zone, or
intervals."""

from __future__ import annotations

from typing import Annotated

import typer

from tocsin.cli.common import ApiOpt, call, client_for, json_option, span

__all__ = ["recurring_app"]

recurring_app = typer.Typer(no_args_is_help=True,
                            help="Recurring schedules: cron rules in a time zone, or "
                                 "intervals (--every).")


@recurring_app.command("add")
def add(
    channel: Annotated[str, typer.Option(help="A registered channel.")],
    cron: Annotated[str | None, typer.Argument(
        help='5 fields, or 6 with seconds: "30 2 * * *" (or give --every).')] = None,
    every: Annotated[str | None, typer.Option(
        help="Instead of CRON: every 90, PT90M, P1D (absolute time).")] = None,
    anchor: Annotated[str | None, typer.Option(
        help="RFC 3339 instant --every counts from (default: now).")] = None,
    jitter: Annotated[str | None, typer.Option(
        help="Each firing up to this much late: 30, PT5M.")] = None,
    payload: Annotated[str, typer.Option(help="The payload as JSON.")] = "null",
    timezone: Annotated[str, typer.Option(help="IANA time zone.")] = "UTC",
    count: Annotated[int, typer.Option(help="Messages per firing.")] = 1,
    stagger: Annotated[str | None, typer.Option(help="Spread them over: 30, PT5M.")] = None,
    misfire: Annotated[str, typer.Option(help="fire_once, fire_all or skip.")] = "fire_once",
    policy: Annotated[str | None, typer.Option(help="A throttling policy.")] = None,
    max_lateness: Annotated[str | None, typer.Option(
        help="A firing's message is not sent this late or later: 90, PT5M.")] = None,
    retry: Annotated[str | None, typer.Option(
        help='Each firing\'s retry policy as JSON: {"max_attempts": 3, "base": 2}.')] = None,
    api: ApiOpt = None,
) -> None:
    """Create a recurring schedule."""
    from tocsin.cli.schedules import terms_options

    call(client_for(api).add_recurring, cron, channel, json_option(payload, "--payload"),
         timezone=timezone, count=count, stagger=stagger, misfire=misfire, policy=policy,
         every=None if every is None else span(every), anchor=anchor,
         jitter=None if jitter is None else span(jitter),
         **terms_options(None, max_lateness, retry))


@recurring_app.command("ls")
def list_recurring(api: ApiOpt = None) -> None:
    """List recurring schedules (the first 1000)."""
    call(lambda: client_for(api).list_recurring(limit=1000)["items"])


@recurring_app.command("get")
def get(recurring_id: str, api: ApiOpt = None) -> None:
    """Show a recurring schedule and its recent firings."""
    client = client_for(api)
    call(lambda: {"recurring": client.get_recurring(recurring_id),
                  "firings": client.firings(recurring_id)})


@recurring_app.command("next")
def next_firings(recurring_id: str, n: int = 10, api: ApiOpt = None) -> None:
    """The next firings, in the zone and in UTC."""
    call(client_for(api).next_firings, recurring_id, n)


@recurring_app.command("pause")
def pause(recurring_id: str, api: ApiOpt = None) -> None:
    """Pause a recurring schedule."""
    call(client_for(api).pause_recurring, recurring_id)


@recurring_app.command("resume")
def resume(recurring_id: str, api: ApiOpt = None) -> None:
    """Resume a paused recurring schedule."""
    call(client_for(api).resume_recurring, recurring_id)


@recurring_app.command("trigger")
def trigger(recurring_id: str, api: ApiOpt = None) -> None:
    """Fire a recurring schedule once now (a firing of its own)."""
    call(client_for(api).trigger_recurring, recurring_id)


@recurring_app.command("backfill")
def backfill(
    recurring_id: str,
    start: Annotated[str, typer.Option("--from", help="RFC 3339: the range's first instant.")],
    end: Annotated[str, typer.Option("--to", help="RFC 3339: the range ends before it.")],
    api: ApiOpt = None,
) -> None:
    """Fire each missed firing of a past range once, due now."""
    call(client_for(api).backfill_recurring, recurring_id, start, end)


@recurring_app.command("rm")
def remove(recurring_id: str, api: ApiOpt = None) -> None:
    """Delete a recurring schedule (its firings still ahead are cancelled)."""
    call(client_for(api).delete_recurring, recurring_id)

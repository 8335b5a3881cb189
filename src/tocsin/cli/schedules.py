"""``tocsin schedule``, ``reschedule``, ``cancel``, ``get`` and ``ls``: one schedule at a time,
through the API."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tocsin.cli.common import ApiOpt, call, client_for, json_option, span

__all__ = ["cancel", "get", "list_schedules", "register", "reschedule", "schedule"]


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
        body["payload"] = json_option(payload, "--payload")
    if text is not None:
        body["payload_text"] = text
    if delay is not None:
        body["delay"] = span(delay)
    if at is not None:
        body["due_at"] = at
    call(client_for(api).schedule, channel, **body)


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
        changes["delay"] = span(delay)
    if payload is not None:
        changes["payload"] = json_option(payload, "--payload")
    call(client_for(api).reschedule, schedule_id, **changes)


def cancel(schedule_id: str, api: ApiOpt = None) -> None:
    """Cancel a schedule (refused when it is already firing or done)."""
    call(client_for(api).cancel, schedule_id)


def get(schedule_id: str, api: ApiOpt = None) -> None:
    """Show one schedule and its deliveries."""
    client = client_for(api)
    call(lambda: {"schedule": client.get(schedule_id),
                  "deliveries": client.deliveries(schedule_id)})


def list_schedules(
    status: Annotated[str | None, typer.Option(help="PENDING, DELIVERED, CANCELLED, DEAD…")] = None,
    channel: Annotated[str | None, typer.Option()] = None,
    key: Annotated[str | None, typer.Option(help="The idempotency key it was created by.")] = None,
    limit: Annotated[int, typer.Option()] = 50,
    api: ApiOpt = None,
) -> None:
    """List schedules."""
    from itertools import islice

    call(lambda: list(islice(client_for(api).list(status=status, channel=channel, key=key),
                             limit)))


def register(app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` command."""
    app.command()(schedule)
    app.command()(reschedule)
    app.command()(cancel)
    app.command()(get)
    app.command("ls")(list_schedules)

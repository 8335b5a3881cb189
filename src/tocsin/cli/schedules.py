"""``tocsin schedule``, ``reschedule``, ``cancel``, ``get`` and ``ls``: one schedule at a time,
through the API."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from tocsin.cli.common import ApiOpt, answering, call, client_for, fail, json_option, span
from tocsin.cli.output import emit, json_wanted

__all__ = ["LIST_COLUMNS", "cancel", "get", "list_schedules", "register", "reschedule",
           "schedule"]

FLAGS = {"payload": "--payload", "payload_text": "--text", "delay": "--delay", "due_at": "--at",
         "key": "--key", "ordering_key": "--ordering-key", "policy": "--policy",
         "headers": "--header", "channel": "CHANNEL", "expires_at": "--expires-at",
         "max_lateness": "--max-lateness", "retry": "--retry", "body": "--body",
         "method": "--method", "path": "--path"}
"""The flag that gives each field of a schedule, for errors about it."""
DELAY_HELP = "When, from now: seconds (90), 90s, 5m, 2h, 1d, or ISO 8601 (PT5M)."
LIST_COLUMNS = ("id", "status", "channel", "due_at", "attempts")
"""What ``tocsin ls`` shows in a terminal (``--wide``: every field)."""


def schedule(
    channel: str,
    payload: Annotated[str | None, typer.Option(help="JSON payload.")] = None,
    text: Annotated[str | None, typer.Option(help="Text payload.")] = None,
    delay: Annotated[str | None, typer.Option(help=DELAY_HELP)] = None,
    at: Annotated[str | None, typer.Option(
        help="Or when: RFC 3339 with an offset (2026-01-01T09:00:00Z).")] = None,
    key: Annotated[str | None, typer.Option(help="Idempotency key.")] = None,
    ordering_key: Annotated[str | None, typer.Option(help="Ordering key.")] = None,
    policy: Annotated[str | None, typer.Option(help="Throttling policy.")] = None,
    header: Annotated[
        list[str] | None, typer.Option(help="Header NAME=VALUE (repeatable).")
    ] = None,
    expires_at: Annotated[str | None, typer.Option(
        help="Not sent at or after this instant (RFC 3339): it expires.")] = None,
    max_lateness: Annotated[str | None, typer.Option(
        help="Not sent this late or later: 90, 5m, PT5M (default: the channel's).")] = None,
    retry: Annotated[str | None, typer.Option(
        help='Retry policy as JSON: {"max_attempts": 3, "base": 2, "cap": 60, '
             '"multiplier": 2, "jitter": 0.5, "max_retry_duration": 3600}.')] = None,
    body_format: Annotated[str | None, typer.Option(
        "--body", help="envelope, raw, cloudevents_binary or cloudevents_structured "
                       "(default: the channel's).")] = None,
    method: Annotated[str | None, typer.Option(
        help="A webhook's method: POST, PUT, PATCH or DELETE.")] = None,
    path: Annotated[str | None, typer.Option(
        help="A path and query after the webhook's URL: /orders/42?x=1.")] = None,
    api: ApiOpt = None,
) -> None:
    """Schedule one message: --payload or --text, and --delay or --at."""
    if (payload is None) == (text is None):
        fail(ValueError("give the message as --payload JSON or --text TEXT (one of them)"))
    if (delay is None) == (at is None):
        fail(ValueError("give when as --delay (seconds, 5m, PT5M) or --at (RFC 3339), "
                        "one of them"))
    if any("=" not in h for h in header or []):
        fail(ValueError("--header takes NAME=VALUE"))
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
    body.update(terms_options(expires_at, max_lateness, retry))
    body.update({k: v for k, v in (("body", body_format), ("method", method), ("path", path))
                 if v is not None})
    with answering(FLAGS):
        emit(client_for(api).schedule(channel, **body))


def terms_options(expires_at: str | None, max_lateness: str | None,
                  retry: str | None) -> dict[str, Any]:
    """The delivery terms the options give, as the client takes them."""
    given: dict[str, Any] = {}
    if expires_at is not None:
        given["expires_at"] = expires_at
    if max_lateness is not None:
        given["max_lateness"] = span(max_lateness)
    if retry is not None:
        value = json_option(retry, "--retry")
        if not isinstance(value, dict):
            fail(ValueError("--retry: give a JSON object"))
        given["retry"] = value
    return given


def reschedule(
    schedule_id: str,
    payload: Annotated[str | None, typer.Option(help="New JSON payload.")] = None,
    delay: Annotated[str | None, typer.Option(help=DELAY_HELP)] = None,
    at: Annotated[str | None, typer.Option(help="New due time, RFC 3339 with offset.")] = None,
    api: ApiOpt = None,
) -> None:
    """Change a pending schedule's due time or payload (refused once it fires)."""
    changes: dict[str, Any] = {"due_at": at}
    if delay is not None:
        changes["delay"] = span(delay)
    if payload is not None:
        changes["payload"] = json_option(payload, "--payload")
    with answering(FLAGS):
        emit(client_for(api).reschedule(schedule_id, **changes))


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
    label: Annotated[str | None, typer.Option(help="A label selector: k=v[,k2=v2].")] = None,
    limit: Annotated[int, typer.Option(help="The most to list.")] = 50,
    wide: Annotated[bool, typer.Option("--wide", help="Every field in the table, not only "
                                                      f"{', '.join(LIST_COLUMNS)}.")] = False,
    api: ApiOpt = None,
) -> None:
    """List schedules, oldest first: a table in a terminal, JSON when piped (or --json)."""
    from itertools import islice

    with answering():
        found = list(islice(client_for(api).list_schedules(status=status, channel=channel, key=key,
                                                        label=label),
                            limit))
    if json_wanted() or wide:
        emit(found)
    else:
        emit([{c: _short_time(row.get(c)) for c in LIST_COLUMNS} for row in found])


def _short_time(value: object) -> object:
    """An RFC 3339 instant without its milliseconds when they are zero (a narrower column)."""
    if isinstance(value, str) and value.endswith(".000Z"):
        return value[:-5] + "Z"
    return value


def register(app: typer.Typer) -> None:
    """Add these verbs to the ``tocsin`` command."""
    app.command()(schedule)
    app.command("ls")(list_schedules)
    app.command()(get)
    app.command()(cancel)
    app.command()(reschedule)

"""A delivery's body and headers in its format (:class:`~tocsin.domain.terms.BodyFormat`):
Tocsin's JSON envelope, the raw payload, or a CloudEvent in binary or structured mode, written
by the CloudEvents SDK's binding for the transport (HTTP, Kafka, RabbitMQ).

Every format carries Tocsin's ``Tocsin-*`` headers and the schedule's own (the file channel,
which has no headers, writes the envelope or the structured event). The CloudEvent's ``id`` is
the delivery id, so a repeat of a delivery keeps it; ``source`` is ``/tocsin/<tenant>/<channel>``,
``type`` ``tocsin.delivery``, ``subject`` the schedule id, ``time`` the due time, and the
extension ``tocsinattempt`` the attempt. The SDK is imported only when a CloudEvent is written.
"""

from __future__ import annotations

import json
from typing import Any, Literal, NamedTuple

from tocsin.domain import Envelope, PayloadKind
from tocsin.domain.terms import BodyFormat

__all__ = ["EVENT_TYPE", "Binding", "Rendered", "body_format", "check_body", "content_type_of",
           "render"]

EVENT_TYPE = "tocsin.delivery"
"""The ``type`` of a delivery written as a CloudEvent."""
Binding = Literal["http", "kafka", "rabbitmq"]
"""Whose CloudEvents binding names the attributes' headers (``ce-``, Kafka's ``ce_``)."""
_TYPES = {PayloadKind.JSON: "application/json", PayloadKind.TEXT: "text/plain; charset=utf-8",
          PayloadKind.BINARY: "application/octet-stream"}


class Rendered(NamedTuple):
    """A delivery as a transport sends it: its body, its content type, and every header
    besides (Tocsin's, the schedule's, a CloudEvent's attributes)."""

    body: bytes
    content_type: str
    headers: dict[str, str]


def body_format(env: Envelope, default: BodyFormat | str | None) -> BodyFormat:
    """The format of ``env``'s body: the schedule's own, else its channel's ``default``."""
    if env.terms is not None and env.terms.body is not None:
        return env.terms.body
    return BodyFormat(default) if default else BodyFormat.ENVELOPE


def check_body(value: str, field: str = "config.body") -> None:
    """ValidationError naming ``field`` unless ``value`` is a :class:`BodyFormat`."""
    from tocsin.errors import ValidationError

    if value not in BodyFormat.__members__.values():
        raise ValidationError(field, f"must be one of {', '.join(BodyFormat)}, not {value!r}")


def content_type_of(env: Envelope) -> str:
    """The payload's content type: the schedule's ``Content-Type`` header, else its kind's."""
    for name, value in env.headers.items():
        if name.lower() == "content-type":
            return value
    return _TYPES[env.payload_kind]


def render(env: Envelope, fmt: BodyFormat, binding: Binding = "http") -> Rendered:
    """``env`` written in ``fmt`` for a transport of ``binding``."""
    headers = env.transport_headers()
    if fmt is BodyFormat.ENVELOPE:
        return Rendered(env.to_json_bytes(), "application/json", headers)
    if fmt is BodyFormat.RAW:
        headers = {k: v for k, v in headers.items() if k.lower() != "content-type"}
        return Rendered(env.payload, content_type_of(env), headers)
    return _cloudevent(env, fmt, binding, headers)


def _data(env: Envelope) -> Any:
    if env.payload_kind is PayloadKind.JSON:
        return json.loads(env.payload)
    if env.payload_kind is PayloadKind.TEXT:
        return env.payload.decode("utf-8")
    return env.payload


def _cloudevent(env: Envelope, fmt: BodyFormat, binding: Binding,
                headers: dict[str, str]) -> Rendered:
    from cloudevents.core.bindings import http, kafka, rabbitmq
    from cloudevents.core.formats.json import JSONFormat
    from cloudevents.core.v1.event import CloudEvent

    from tocsin.clock import from_ms

    ct = content_type_of(env)
    event = CloudEvent({
        "id": env.delivery_id, "source": f"/tocsin/{env.tenant}/{env.channel}",
        "type": EVENT_TYPE, "subject": env.schedule_id, "time": from_ms(env.due_ms),
        "datacontenttype": ct, "tocsinattempt": env.attempt,
    }, _data(env) if env.payload_kind is not PayloadKind.JSON or fmt is
        BodyFormat.CLOUDEVENTS_STRUCTURED else env.payload)
    structured = fmt is BodyFormat.CLOUDEVENTS_STRUCTURED
    own = {k: v for k, v in headers.items() if k.lower() != "content-type"}
    if binding == "kafka":
        message = (kafka.to_structured if structured else kafka.to_binary)(event, JSONFormat())
        attrs = {k: v.decode() for k, v in message.headers.items()}
        body = message.value
    elif binding == "rabbitmq":
        amqp = (rabbitmq.to_structured if structured else rabbitmq.to_binary)(event,
                                                                             JSONFormat())
        attrs, body = dict(amqp.headers), amqp.body
        ct = amqp.content_type or ct
    else:
        msg = (http.to_structured if structured else http.to_binary)(event, JSONFormat())
        attrs, body = dict(msg.headers), msg.body
    content_type = next((v for k, v in attrs.items() if k.lower() == "content-type"), ct)
    attrs = {k: v for k, v in attrs.items() if k.lower() != "content-type"}
    return Rendered(body, content_type, {**own, **attrs})


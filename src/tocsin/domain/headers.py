"""A message's headers: what a schedule may carry, and what only Tocsin writes.

A schedule's headers travel with every delivery: as HTTP request headers to a webhook, as
Kafka record headers, as AMQP message headers. :func:`header_problem` is the one rule, at the
edge (the API, the commands topic, the import) and again at a webhook's send: a name is an HTTP
token (no space, CR, LF or other separator), a value holds no CR, LF or NUL, and the names that
frame or route a request (``Host``, ``Content-Length``, ``Transfer-Encoding``, the hop-by-hop
headers) or that Tocsin itself writes (``Tocsin-*``, the Standard Webhooks ``webhook-*``) are
refused: a receiver got ``Transfer-Encoding: chunked`` beside a ``Content-Length`` before.
:data:`TOCSIN_PREFIX` names are dropped from a stored schedule's headers when a message is sent
(:meth:`~tocsin.domain.Envelope.transport_headers`), so a schedule written before the rule
cannot shadow the delivery id either.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

__all__ = ["EXPANDER_HEADERS", "RESERVED_HEADERS", "TOCSIN_PREFIX", "header_problem",
           "headers_problem", "stored_headers"]

_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
TOCSIN_PREFIX = "tocsin-"
"""Headers Tocsin writes on every message (``Tocsin-Delivery-Id``…), compared in lower case."""
RESERVED_HEADERS = frozenset({
    "host", "content-length", "transfer-encoding", "connection", "keep-alive",
    "proxy-connection", "proxy-authenticate", "proxy-authorization", "te", "trailer",
    "upgrade", "expect", "webhook-id", "webhook-timestamp", "webhook-signature",
})
"""Names no schedule or channel may set (lower case): HTTP framing and routing, hop-by-hop
headers, and the signature headers Tocsin writes."""


EXPANDER_HEADERS = frozenset({"tocsin-recurring-id", "tocsin-firing-at", "tocsin-firing-index"})
"""The ``Tocsin-*`` headers Tocsin itself stores on a recurring rule's messages (the expander):
sent as they are, never refused at a send."""


def stored_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """A stored schedule's headers as they are sent: its ``Tocsin-*`` headers dropped (one
    stored before the edge refused them must not shadow a delivery's own), but for the
    expander's :data:`EXPANDER_HEADERS`."""
    return {k: v for k, v in headers.items()
            if not k.lower().startswith(TOCSIN_PREFIX) or k.lower() in EXPANDER_HEADERS}


def header_problem(name: str, value: str) -> str | None:
    """Why the header ``name: value`` cannot be sent, or None."""
    if _TOKEN.fullmatch(name) is None:
        return "is not an HTTP token (no spaces, line breaks or separators)"
    lower = name.lower()
    if lower in RESERVED_HEADERS or lower.startswith(TOCSIN_PREFIX):
        return "is set by Tocsin or the HTTP client, not by a message"
    if any(c in value for c in "\r\n\0"):
        return "holds a line break or NUL"
    return None


def headers_problem(headers: Mapping[str, str]) -> str | None:
    """Why ``headers`` cannot be sent (naming the first bad header), or None."""
    for name, value in headers.items():
        if (why := header_problem(name, value)) is not None:
            return f"header {name!r} {why}"
    return None

"""Trace context: a schedule's W3C ``traceparent``/``tracestate`` (given when it was created)
travels in its headers to each delivery; and spans — ``tocsin.create`` (API), ``tocsin.claim``,
``tocsin.send``, ``tocsin.acknowledge`` (dispatcher) — when the OpenTelemetry SDK is installed
and the process configured a tracer provider.

Off costs nothing: :func:`span` answers a shared null context unless ``opentelemetry`` has been
imported by the process and its global tracer provider is a real one (one dict lookup and one
``isinstance``), so Tocsin never imports OpenTelemetry itself unless the application did.
"""

from __future__ import annotations

import contextlib
import json
import re
import sys
from collections.abc import Iterable, Iterator, Mapping
from contextlib import AbstractContextManager
from typing import Any

__all__ = ["TRACE_HEADERS", "active", "inject", "span", "trace_headers"]

TRACE_HEADERS = ("traceparent", "tracestate")
"""The W3C trace context headers a schedule carries to its deliveries."""
_TRACEPARENT = re.compile(r"^(?!ff)[0-9a-f]{2}-(?!0{32})[0-9a-f]{32}-(?!0{16})[0-9a-f]{16}"
                          r"-[0-9a-f]{2}$")
_TRACESTATE_MAX = 512
_NULL = contextlib.nullcontext()
_MAX_LINKS = 128


def trace_headers(headers: Mapping[str, str]) -> dict[str, str]:
    """The valid W3C trace context among ``headers`` (any case), named in lower case. An
    invalid ``traceparent`` is ignored, with its ``tracestate`` (as the W3C spec asks of a
    receiver)."""
    lower = {k.lower(): v for k, v in headers.items() if k.lower() in TRACE_HEADERS}
    parent = lower.get("traceparent", "").strip()
    if not _TRACEPARENT.match(parent):
        return {}
    out = {"traceparent": parent}
    state = lower.get("tracestate", "").strip()
    if state and len(state) <= _TRACESTATE_MAX and state.isascii() and state.isprintable():
        out["tracestate"] = state
    return out


def active() -> bool:
    """Whether spans are recorded: OpenTelemetry imported and a real provider configured."""
    if "opentelemetry.trace" not in sys.modules:
        return False
    from opentelemetry import trace

    return not isinstance(trace.get_tracer_provider(),
                          trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _context_of(carrier: Mapping[str, str]) -> Any:
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

    return TraceContextTextMapPropagator().extract(carrier=dict(carrier))


def _links(carriers: Iterable[Mapping[str, str]]) -> list[Any]:
    from opentelemetry import trace

    links: list[Any] = []
    for carrier in carriers:
        if len(links) >= _MAX_LINKS:
            break
        if "traceparent" in carrier:
            context = trace.get_current_span(_context_of(carrier)).get_span_context()
            if context.is_valid:
                links.append(trace.Link(context))
    return links


def span(name: str, *, parent: Mapping[str, str] | None = None,
         links: Iterable[Mapping[str, str]] = (),
         attributes: Mapping[str, Any] | None = None) -> AbstractContextManager[Any]:
    """A span named ``name`` (a child of ``parent``'s trace context when given, linked to
    each of ``links``' trace contexts), or a null context when tracing is off."""
    if not active():
        return _NULL
    return _span(name, parent, links, dict(attributes or {}))


@contextlib.contextmanager
def _span(name: str, parent: Mapping[str, str] | None, links: Iterable[Mapping[str, str]],
          attributes: dict[str, Any]) -> Iterator[Any]:
    from opentelemetry import trace

    tracer = trace.get_tracer("tocsin")
    context = _context_of(parent) if parent else None
    with tracer.start_as_current_span(name, context=context, links=_links(links),
                                      attributes=attributes) as current:
        yield current


def inject(headers: dict[str, str]) -> None:
    """Add the current span's trace context to ``headers`` (when tracing is on and none is
    there)."""
    if active() and "traceparent" not in {k.lower() for k in headers}:
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        TraceContextTextMapPropagator().inject(headers)


def row_contexts(headers_json: Iterable[str]) -> Iterator[dict[str, str]]:
    """The trace context of each claimed row's stored headers (JSON text) that has one."""
    for text in headers_json:
        if "traceparent" in text:
            found = trace_headers(json.loads(text))
            if found:
                yield found

"""Trace context through the real API and the delivery engine on both stores, to a real
webhook receiver: a ``traceparent``/``tracestate`` sent when a schedule is created arrives
intact with its delivery; with the OpenTelemetry SDK configured, the API and the dispatcher
emit create, claim, send and acknowledge spans linked to it; off, Tocsin records nothing."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tocsin import tracing
from tocsin.abc import Store
from tocsin.clock import SystemClock
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.testing.receiver import Receiver

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"


@pytest.fixture(scope="module")
def hook(api_store: Store, receiver_server: Receiver) -> Iterator[LocalDispatcher]:
    """One dispatcher (one run) for the module's store."""
    api_store.put_channel(ChannelSpec(name="traced", kind=ChannelKind.WEBHOOK,
                                      config={"url": receiver_server.url + "/traced"}))
    local = LocalDispatcher(api_store, clock=SystemClock())
    yield local
    local.close()


def _deliver(api: httpx.Client, local: LocalDispatcher, receiver: Receiver,
             headers: dict[str, str]) -> dict[str, str]:
    made = api.post("/v1/schedules", headers=headers,
                    json={"channel": "traced", "payload": {"a": 1}, "delay": 0})
    assert made.status_code == 201, made.text
    local.run_until_idle()
    [got] = [r for r in receiver.received(None)
             if r.headers.get("tocsin-schedule-id") == made.json()["id"]]
    return got.headers


def test_a_traceparent_arrives_intact_and_a_bad_one_is_dropped(
        api: httpx.Client, hook: LocalDispatcher, receiver: Receiver) -> None:
    assert not tracing.active()
    got = _deliver(api, hook, receiver, {"traceparent": PARENT, "tracestate": "vendor=x1"})
    assert (got["traceparent"], got["tracestate"]) == (PARENT, "vendor=x1")
    bad = _deliver(api, hook, receiver, {"traceparent": "00-xyz-01", "tracestate": "v=1"})
    assert "traceparent" not in bad and "tracestate" not in bad


def test_spans_link_the_create_and_the_delivery_to_the_trace(
        api: httpx.Client, hook: LocalDispatcher, receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)  # restored after the test
    assert tracing.active()
    _deliver(api, hook, receiver, {"traceparent": PARENT})
    spans = {s.name: s for s in exporter.get_finished_spans()}
    assert {"tocsin.create", "tocsin.claim", "tocsin.send", "tocsin.acknowledge"} <= set(spans)
    assert format(spans["tocsin.create"].context.trace_id, "032x") == TRACE_ID
    links = [format(link.context.trace_id, "032x") for link in spans["tocsin.send"].links]
    assert links == [TRACE_ID]


def test_the_client_sends_its_callers_trace_context(
        api: httpx.Client, hook: LocalDispatcher, receiver: Receiver,
        monkeypatch: pytest.MonkeyPatch) -> None:
    from tocsin.client import Client

    provider = TracerProvider()
    monkeypatch.setattr(trace, "_TRACER_PROVIDER", provider)
    key = api.headers["authorization"].removeprefix("Bearer ")
    with provider.get_tracer("app").start_as_current_span("checkout") as mine, \
            Client(str(api.base_url), api_key=key) as client:
        made = client.schedule("traced", {"a": 2}, delay=0)
    hook.run_until_idle()
    [got] = [r for r in receiver.received(None)
             if r.headers.get("tocsin-schedule-id") == made["id"]]
    assert got.headers["traceparent"].split("-")[1] == format(
        mine.get_span_context().trace_id, "032x")

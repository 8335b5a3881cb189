"""Delivery terms through the real dispatcher (a Spark session) on both stores, to a real
webhook receiver: what falls past its deadline while no dispatcher runs — a schedule claimed by
a process that died before sending it, and one simply due during the outage — becomes EXPIRED
and is never sent; what is still within its terms goes out, in its body format (a binary
CloudEvent read back by the SDK; a raw body PUT to its path), with its traceparent intact."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cloudevents.core.bindings import http
from cloudevents.core.formats.json import JSONFormat

from tocsin.abc import Store
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.domain.terms import BodyFormat, Terms, WebhookMethod
from tocsin.stores import open_store
from tocsin.testing.dispatch import running_dispatcher, wait_until
from tocsin.testing.receiver import Receiver

pytestmark = pytest.mark.spark
LEASE_MS = 3_000


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    opened = open_store(backend_url, buckets=16)
    yield opened
    opened.close()


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def _one(store: Store, terms: Terms | None, **fields: object) -> str:
    now = _now()
    [(made, _)] = store.create([NewSchedule(channel="hook", payload=b'{"k":1}', due_ms=now,
                                            terms=terms, **fields)],  # type: ignore[arg-type]
                               now_ms=now)
    return made.id


def test_an_expired_schedule_is_never_sent_even_when_claimed_before_an_outage(
        spark, store: Store, backend_url: str, receiver: Receiver, tmp_path: Path) -> None:
    store.put_channel(ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                                  config={"url": receiver.url + "/ok"}))
    receiver.reset()
    lateness = Terms(max_lateness_ms=2_000)
    claimed = _one(store, lateness)
    now = _now()
    [row] = store.claim(epoch=store.next_epoch(), bucket_lo=0, bucket_hi=store.buckets - 1,
                        until_ms=now, now_ms=now, lease_ms=LEASE_MS, limit=10)
    assert row.id == claimed  # a dispatcher claimed it at its due instant, then died
    during = _one(store, lateness)  # due while no dispatcher runs
    within = _one(store, Terms(max_lateness_ms=600_000, body=BodyFormat.CLOUDEVENTS_BINARY),
                  headers={"traceparent": TRACEPARENT})
    plain = _one(store, Terms(body=BodyFormat.RAW, method=WebhookMethod.PUT, path="/x?y=1"))
    time.sleep(LEASE_MS / 1000 + 0.5)  # the outage outlasts the deadlines and the lease
    with running_dispatcher(spark, backend_url, tmp_path / "ck", buckets=16,
                            lease_ms=LEASE_MS):
        wait_until(lambda: [store.get(i).status for i in (claimed, during, within, plain)]
                   == [Status.EXPIRED, Status.EXPIRED, Status.DELIVERED, Status.DELIVERED],
                   timeout_s=120, what="two expired, two delivered")
    got = {r.headers["tocsin-schedule-id"]: r for r in receiver.received(None)}
    assert set(got) == {within, plain}
    event = http.from_binary(http.HTTPMessage(headers=got[within].headers,
                                              body=got[within].body), JSONFormat())
    assert (event.get_id(), event.get_data()) == (f"{within}-1", {"k": 1})
    assert got[within].headers["traceparent"] == TRACEPARENT
    assert (got[plain].method, got[plain].path, got[plain].body) == ("PUT", "/ok/x?y=1",
                                                                     b'{"k":1}')
    for gone in (claimed, during):
        expired = store.get(gone)
        assert "expired" in (expired.last_error or "") and expired.delivered_ms is None
        assert [d.outcome.value for d in store.deliveries(gone)] == ["expired"]

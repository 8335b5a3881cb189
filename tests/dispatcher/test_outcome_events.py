"""Outcome events, deterministically on both stores through the delivery engine
(LocalDispatcher): every final outcome of a channel that names an events channel — delivered,
dead, expired, cancelled — and, when asked, every attempt arrives there as a CloudEvent that
the SDK reads, with an id a repeat keeps; events have no events of their own."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from cloudevents.core.bindings import http
from cloudevents.core.formats.json import JSONFormat

from tests.dispatcher.conftest import rig_over
from tests.dispatcher.test_core import T0, Rig
from tocsin.domain import Status
from tocsin.domain.terms import Terms
from tocsin.stores.sql.outcomes import EVENT_PREFIX


@pytest.fixture
def rig(backend_url: str) -> Iterator[Rig]:
    with rig_over(backend_url, Rig) as rig:
        yield rig


def _events(rig: Rig) -> dict[str, object]:
    """The events channel's events by subject, read by the CloudEvents SDK."""
    out = {}
    for env in rig.recordings.recorded("ev"):
        assert env.headers["Content-Type"] == "application/cloudevents+json"
        event = http.from_structured(http.HTTPMessage(
            headers={"content-type": "application/cloudevents+json"}, body=env.payload),
            JSONFormat())
        assert event.get_id() == env.schedule_id  # the event's schedule is named by its id
        out[event.get_subject()] = event
    return out


def test_every_final_outcome_is_an_event_on_the_events_channel(rig: Rig) -> None:
    rig.channel("ev")
    rig.channel("out", events="ev", max_lateness=60)
    rig.channel("bad", events="ev", fail="reject")
    [delivered] = rig.schedule("out")
    [late] = rig.schedule("out", in_ms=1_000, terms=Terms(max_lateness_ms=1))
    [cancelled] = rig.schedule("out", in_ms=60_000)
    [dead] = rig.schedule("bad")
    rig.local.step()
    rig.store.cancel(cancelled, now_ms=rig.clock.now_ms())
    rig.at(T0 + 5_000)
    rig.local.run_until_idle()
    events = _events(rig)
    kinds = {sid: (e.get_type(), e.get_data()["status"]) for sid, e in events.items()}
    assert kinds == {delivered: ("tocsin.schedule.delivered", "DELIVERED"),
                     late: ("tocsin.schedule.expired", "EXPIRED"),
                     cancelled: ("tocsin.schedule.cancelled", "CANCELLED"),
                     dead: ("tocsin.schedule.dead", "DEAD")}
    assert events[dead].get_data()["error"]
    assert events[delivered].get_id() == f"{EVENT_PREFIX}{delivered}:DELIVERED:1"
    # the events went out as schedules of their own, and made no events
    assert {rig.get(e.get_id()).status for e in events.values()} == {Status.DELIVERED}
    assert len(rig.recordings.recorded("ev")) == 4


def test_every_attempt_when_asked_and_none_without_an_events_channel(rig: Rig) -> None:
    rig.channel("ev")
    rig.channel("flaky", events="ev", events_attempts=True, fail="retry", fail_first=1)
    rig.channel("quiet")
    [sid] = rig.schedule("flaky")
    [other] = rig.schedule("quiet")
    rig.local.step()
    rig.at(rig.get(sid).next_ms or 0)
    rig.local.run_until_idle()
    seen = [json.loads(e.payload)["data"] for e in rig.recordings.recorded("ev")]
    # events carry no ordering key: a loaded CI machine sent the second before the first
    assert sorted((d["attempt"], d["status"]) for d in seen) == [(1, "PENDING"), (2, "DELIVERED")]
    assert {d["schedule_id"] for d in seen} == {sid} and other not in {d["schedule_id"]
                                                                        for d in seen}


def test_a_tenants_events_channel_serves_its_channels_that_name_none(rig: Rig) -> None:
    from tocsin.domain import Tenant

    rig.channel("ev")
    rig.channel("mine")
    rig.store.put_tenant(Tenant("default", events="ev"), now_ms=T0)
    [sent] = rig.schedule("mine")
    [cancelled] = rig.schedule("mine", in_ms=60_000)
    rig.store.cancel(cancelled, now_ms=T0)
    rig.local.run_until_idle()
    events = _events(rig)
    assert {s: e.get_data()["status"] for s, e in events.items()} == {
        sent: "DELIVERED", cancelled: "CANCELLED"}  # and none for the events themselves


def test_a_bulk_cancel_publishes_each_cancelled_schedules_event(rig: Rig) -> None:
    from tocsin.domain import Selection

    rig.channel("ev")
    rig.channel("out", events="ev")
    ids = rig.schedule("out", in_ms=60_000, n=3)
    done = rig.store.cancel_where(Selection(channel="out"), now_ms=T0, chunk=2)
    assert done.changed == 3
    rig.local.run_until_idle()
    assert {s: e.get_data()["status"] for s, e in _events(rig).items()} == dict.fromkeys(
        ids, "CANCELLED")

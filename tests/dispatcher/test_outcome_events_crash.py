"""Outcome events survive a kill -9 of the dispatcher: 10 000 schedules, 5 % dead (refused by
their channel) and 5 % expired, the dispatcher killed in the middle and restarted; every
schedule's outcome event arrives on the events channel with the right status, none is missing,
and a repeat keeps its event id."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from cloudevents.core.bindings import http
from cloudevents.core.formats.json import JSONFormat

from tocsin.clock import SystemClock
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.domain.terms import BodyFormat, Terms
from tocsin.testing.dispatch import dispatcher_env, file_store, read_lines, wait_until
from tocsin.testing.processes import kill_tree, start_tocsin

pytestmark = [pytest.mark.spark, pytest.mark.slow]

N = 10_000


def _events(path: Path) -> list[dict[str, Any]]:
    """The events written so far: complete lines only (CI read one the file channel was still
    writing, and failed on its half)."""
    return read_lines(path)


def test_every_outcome_event_arrives_through_a_kill_9(tmp_path: Path,
                                                      say: Callable[[str], None]) -> None:
    store, out = file_store(tmp_path, buckets=32)
    ev = tmp_path / "ev.jsonl"
    store.put_channel(ChannelSpec(name="ev", kind=ChannelKind.FILE,
                                  config={"path": str(ev), "body": "raw"}))
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                  config={"path": str(out), "events": "ev"}))
    env = dispatcher_env(tmp_path, buckets=32, master="local[*]", lease_s=15)
    first = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-1.log")
    want: dict[str, str] = {}
    try:
        wait_until(lambda: store.last_beat("dispatcher-source"), timeout_s=120,
                   what="the dispatcher to start")
        now = SystemClock().now_ms()
        items = []
        for i in range(N):
            due = now + 2_000 + 20_000 * i // N
            if i % 20 == 0:  # dead: a raw body holding a line break, which a file refuses
                items.append(NewSchedule(channel="out", payload=b'"a\\nb"\n', due_ms=due,
                                         terms=Terms(body=BodyFormat.RAW)))
            elif i % 20 == 1:  # expired: due 10 s ago, at most 1 s late
                items.append(NewSchedule(channel="out", payload=b"{}", due_ms=now - 10_000,
                                         terms=Terms(max_lateness_ms=1_000)))
            else:
                items.append(NewSchedule(channel="out", payload=b'{"n": %d}' % i, due_ms=due))
        for i, (made, _) in enumerate(store.create(items, now_ms=now)):
            want[made.id] = ("DEAD", "EXPIRED")[i % 20] if i % 20 < 2 else "DELIVERED"
        wait_until(lambda: len(_events(ev)) > N // 4, timeout_s=120, what="a quarter")
    finally:
        kill_tree(first)
    at_kill = len(_events(ev))
    assert at_kill < N, "the kill must land mid-run for this test to mean anything"
    second = start_tocsin("dispatcher", env=env, log=tmp_path / "dispatcher-2.log")
    try:
        wait_until(lambda: {e["subject"] for e in _events(ev)} >= set(want), timeout_s=300,
                   interval_s=1, what="an outcome event for every schedule")
    finally:
        kill_tree(second)
    events = _events(ev)
    ids: dict[str, set[object]] = {}
    statuses: dict[str, set[object]] = {}
    for e in events:
        subject = str(e["subject"])
        ids.setdefault(subject, set()).add(e["id"])
        statuses.setdefault(subject, set()).add(e["data"]["status"])  # type: ignore[index]
    assert set(ids) == set(want)  # none missing, none made up
    assert all(len(v) == 1 for v in ids.values()), "a repeat changed its event id"
    assert {s: next(iter(v)) for s, v in statuses.items()} == want
    assert sum(1 for v in want.values() if v == "DEAD") == N // 20
    assert sum(1 for v in want.values() if v == "EXPIRED") == N // 20
    sample = (ev.read_bytes().splitlines()[0])
    event = http.from_structured(http.HTTPMessage(
        headers={"content-type": "application/cloudevents+json"}, body=sample), JSONFormat())
    assert str(event.get_id()).startswith("outcome:")
    counts = store.counts()
    assert (counts[Status.DEAD], counts[Status.EXPIRED]) == (N // 20, N // 20)
    repeats = len(events) - len(ids)
    say(f"kill -9 at {at_kill}/{N} outcome events; {len(events)} event lines after the "
        f"restart, {repeats} repeats, each with its first id; lines in out: "
        f"{len(read_lines(out))}")

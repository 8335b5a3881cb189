"""Retries with back-off, dead letters and permanent refusals, end to end on real Spark
against a real webhook receiver."""

from __future__ import annotations

import itertools
import time
from pathlib import Path

import pytest

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Outcome, Status
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.dispatch import read_lines, running_dispatcher, wait_until
from tocsin.testing.receiver import Receiver

pytestmark = pytest.mark.spark


def _now() -> int:
    return time.time_ns() // 1_000_000


def test_retry_back_off_dead_letter_and_refusal(spark, receiver: Receiver,  # type: ignore[no-untyped-def]
                                                tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=8)
    dlq = tmp_path / "dlq.jsonl"
    store.put_channel(ChannelSpec(name="dlq", kind=ChannelKind.FILE, config={"path": str(dlq)}))
    for name, path, attempts in (("failing", "/fail", 3), ("gone", "/gone", 3),
                                 ("flaky", "/flaky", 20)):
        store.put_channel(ChannelSpec(name=name, kind=ChannelKind.WEBHOOK, config={
            "url": receiver.url + path, "max_attempts": attempts, "dead_letter": "dlq"}))
    receiver.reset(by_path={"/fail": 503, "/gone": 404, "/flaky": 500})
    now = _now()
    (failing, _), (gone, _), (flaky, _) = store.create([
        NewSchedule(channel=c, payload=b'{"c": "%s"}' % c.encode(), due_ms=now)
        for c in ("failing", "gone", "flaky")], now_ms=now)
    with running_dispatcher(spark, f"sqlite:///{tmp_path / 't.db'}", tmp_path / "ck", buckets=8,
                            retry_base_ms=300, retry_cap_ms=1_000, trigger_seconds=0.2):
        wait_until(lambda: store.get(flaky.id).attempts >= 2, timeout_s=90, what="2 attempts")
        receiver.behaviour.by_path["/flaky"] = 200
        wait_until(lambda: store.get(failing.id).status is Status.DEAD, timeout_s=60,
                   what="the failing schedule to die")
        wait_until(lambda: store.get(flaky.id).status is Status.DELIVERED, timeout_s=60,
                   what="the flaky schedule to get through")
        wait_until(lambda: len(read_lines(dlq)) == 2, timeout_s=60, what="two dead letters")

    dead = store.get(failing.id)
    assert dead.attempts == 3 and "HTTP 503" in (dead.last_error or "")
    log = store.deliveries(failing.id)
    assert [(d.attempt, d.outcome) for d in log] == [(1, Outcome.RETRY), (2, Outcome.RETRY),
                                                     (3, Outcome.RETRY)]
    assert [d.delivery_id for d in log] == [f"{failing.id}-{n}" for n in (1, 2, 3)]
    gaps = [b.started_ms - a.ended_ms for a, b in itertools.pairwise(log)]
    assert all(gap >= 150 for gap in gaps), f"retries came without back-off: {gaps}"
    attempts_seen = [r.headers["tocsin-attempt"] for r in receiver.received(None)
                     if r.path == "/fail"]
    assert attempts_seen == ["1", "2", "3"]

    refused = store.get(gone.id)
    assert refused.status is Status.DEAD and refused.attempts == 1

    got_through = store.deliveries(flaky.id)
    assert len(got_through) >= 3
    assert [d.outcome for d in got_through[:-1]] == [Outcome.RETRY] * (len(got_through) - 1)
    assert got_through[-1].outcome is Outcome.DELIVERED
    letters = {line["headers"]["Tocsin-Dead-Letter-Of"]: line for line in read_lines(dlq)}
    assert set(letters) == {failing.id, gone.id}
    assert letters[failing.id]["payload"] == {"c": "failing"}

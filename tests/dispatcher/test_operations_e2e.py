"""Pause, resume and re-drive through the real dispatcher (Spark), on both stores."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tocsin.dispatcher.channel_cache import SPEC_TTL_MS
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Outcome, Status
from tocsin.stores import open_store
from tocsin.testing.dispatch import read_lines, running_dispatcher, wait_until

pytestmark = pytest.mark.spark


def _now() -> int:
    return time.time_ns() // 1_000_000


def test_pause_holds_resume_delivers_and_redrive_sends_the_dead_again(
        spark: object, backend_url: str, tmp_path: Path) -> None:
    store = open_store(backend_url, buckets=16)
    out, side, late = (tmp_path / f"{n}.jsonl" for n in ("out", "side", "late"))
    for name, path in (("out", out), ("side", side)):
        store.put_channel(ChannelSpec(name=name, kind=ChannelKind.FILE,
                                      config={"path": str(path)}))
    store.pause_channel("out", tenant="default", now_ms=_now())
    now = _now()
    held = [s.id for s, _ in store.create(
        [NewSchedule(channel="out", payload=b'{"n": %d}' % i, due_ms=now - 1000 + i)
         for i in range(5)], now_ms=now)]
    # due after the held ones and on an unpaused channel: once it is delivered, a claim has
    # passed over the held ones (claims take the earliest first, with no lower bound)
    [(probe, _)] = store.create([NewSchedule(channel="side", payload=b"1", due_ms=now)],
                                now_ms=now)
    [(dead, _)] = store.create([NewSchedule(channel="late", payload=b"2", due_ms=now)],
                               now_ms=now)
    try:
        with running_dispatcher(spark, backend_url, tmp_path / "ck", buckets=16):  # type: ignore[arg-type]
            wait_until(lambda: store.get(probe.id).status is Status.DELIVERED, timeout_s=90,
                       what="the unpaused channel's delivery")
            wait_until(lambda: store.get(dead.id).status is Status.DEAD, timeout_s=30,
                       what="the unregistered channel's schedule dead")
            assert {store.get(i).status for i in held} == {Status.PENDING}
            assert read_lines(out) == []

            assert store.resume_channel("out", tenant="default")
            wait_until(lambda: len(read_lines(out)) == 5, timeout_s=60, what="resumed deliveries")
            wait_until(lambda: {store.get(i).status for i in held} == {Status.DELIVERED},
                       timeout_s=30, what="acknowledgements")
            assert all(store.get(i).lateness_ms >= 1000 for i in held)  # type: ignore[operator]

            store.put_channel(ChannelSpec(name="late", kind=ChannelKind.FILE,
                                          config={"path": str(late)}))
            time.sleep(SPEC_TTL_MS / 1000 + 1)  # the dispatcher re-reads a channel this often
            store.redrive(dead.id, now_ms=_now())
            wait_until(lambda: store.get(dead.id).status is Status.DELIVERED, timeout_s=60,
                       what="the re-driven schedule delivered")
        [line] = read_lines(late)
        assert line["delivery_id"] == f"{dead.id}-2"
        log = store.deliveries(dead.id)
        assert [(d.attempt, d.outcome) for d in log] == [(1, Outcome.REJECTED),
                                                         (2, Outcome.DELIVERED)]
    finally:
        store.close()

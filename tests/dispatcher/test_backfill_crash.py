"""Issue 42: a backfill killed with kill -9 half way and run again fires each firing once, and
the dispatcher delivers each firing's messages once: every firing accounted exactly once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from tocsin.clock import SystemClock
from tocsin.dispatcher.local import LocalDispatcher
from tocsin.domain import ChannelKind, ChannelSpec, IntervalTrigger, Recurring, Status
from tocsin.firing import BACKFILL_CHUNK, backfill
from tocsin.stores import open_store
from tocsin.testing.dispatch import wait_until

MINUTE_MS = 60_000
FIRINGS = 1_000
COUNT = 3
# The backfill in a process of its own, a pause after each chunk's transaction so that the
# kill lands between two of them.
CHILD = textwrap.dedent("""
    import sys, time
    from tocsin.firing import backfill
    from tocsin.stores import open_store
    url, rule_id, start, end, now = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
    store = open_store(url, buckets=8)
    fire = store.fire_recurring
    def slowly(*args, **kwargs):
        fired = fire(*args, **kwargs)
        time.sleep(0.3)
        return fired
    store.fire_recurring = slowly
    rule = store.get_recurring(rule_id)
    backfill(store, rule, from_ms=start, to_ms=end, now_ms=now, max_firings=1000)
""")


def _stored(store: object, rule_id: str) -> dict[int, int]:
    rows = store._rows(  # type: ignore[attr-defined]
        "SELECT firing_ms, count(*) FROM schedules WHERE recurring_id = ? GROUP BY firing_ms",
        (rule_id,))
    return {int(f): int(n) for f, n in rows}


def test_a_backfill_killed_half_way_fires_each_firing_once(backend_url: str,
                                                           tmp_path: Path) -> None:
    out = tmp_path / "out.jsonl"
    store = open_store(backend_url, buckets=8)
    try:
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE,
                                      config={"path": str(out)}))
        now = SystemClock().now_ms()
        anchor = now - now % MINUTE_MS
        rule = store.create_recurring(Recurring(
            id="rec-backfill", trigger=IntervalTrigger(every_ms=MINUTE_MS, anchor_ms=anchor),
            channel="out", payload=b'{"n": 1}', count=COUNT, created_ms=now, updated_ms=now),
            now_ms=now)
        start, end = anchor - (FIRINGS + 10) * MINUTE_MS, anchor - 10 * MINUTE_MS
        child = subprocess.Popen([sys.executable, "-c", CHILD, backend_url, rule.id,
                                  str(start), str(end), str(now)], start_new_session=True)
        try:
            wait_until(lambda: len(_stored(store, rule.id)) >= BACKFILL_CHUNK, timeout_s=60,
                       interval_s=0.05, what="the first chunk written")
            os.killpg(child.pid, signal.SIGKILL)
        finally:
            child.wait(timeout=30)
        half = _stored(store, rule.id)
        assert BACKFILL_CHUNK <= len(half) < FIRINGS, "the kill landed too late"
        assert set(half.values()) == {COUNT}  # a chunk is all or nothing
        rerun = backfill(store, store.get_recurring(rule.id), from_ms=start, to_ms=end,
                         now_ms=SystemClock().now_ms(), max_firings=FIRINGS)
        assert (rerun.firings, rerun.already) == (FIRINGS - len(half), len(half))
        stored = _stored(store, rule.id)
        assert sorted(stored) == [start + k * MINUTE_MS for k in range(FIRINGS)]
        assert set(stored.values()) == {COUNT}
        local = LocalDispatcher(store, clock=SystemClock())
        try:
            local.run_until_idle(max_steps=200)
        finally:
            local.close()
        lines = [json.loads(line) for line in out.read_text().splitlines()]
        ids = [line["schedule_id"] for line in lines
               if line["schedule_id"].startswith(f"{rule.id}.backfill:")]
        assert len(ids) == len(set(ids)) == FIRINGS * COUNT  # each message delivered once
        # the range's firings (the expander fires the rule's latest on its own)
        firings = [f for f in store.recurring_firings(rule.id, limit=FIRINGS + 10)
                   if f.firing_ms < end]
        assert len(firings) == FIRINGS
        assert {(f.outcome, tuple(f.messages.items())) for f in firings} == {
            ("expanded", ((Status.DELIVERED.value, COUNT),))}
    finally:
        store.close()

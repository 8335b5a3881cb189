"""The expander's heartbeat format: versioned, and read back as written."""

from __future__ import annotations

import json

from tocsin.dispatcher.beat import EXPANDER_BEAT_KEYS, EXPANDER_BEAT_VERSION, ExpanderBeat


def test_a_beat_round_trips_through_its_stored_form() -> None:
    first = ExpanderBeat.from_info(None).after(0, {"recurring": 2, "firings": 3,
                                                   "messages": 30, "skipped": 1})
    second = first.after(1, {"recurring": 1, "firings": 1, "messages": 10, "skipped": 0})
    stored = json.loads(json.dumps(second.to_info()))
    assert stored["v"] == EXPANDER_BEAT_VERSION
    assert ExpanderBeat.from_info(stored) == second
    assert second.totals == {"recurring": 3, "firings": 4, "messages": 40, "skipped": 1}
    assert second.batch == {"recurring": 1, "firings": 1, "messages": 10, "skipped": 0}


def test_the_unversioned_beat_written_before_is_read() -> None:
    old = {"batch_id": 9, "batch": dict.fromkeys(EXPANDER_BEAT_KEYS, 1), "totals": [5, 6, 7, 8]}
    beat = ExpanderBeat.from_info(old)
    assert beat.batch_id == 9
    assert beat.totals == {"recurring": 5, "firings": 6, "messages": 7, "skipped": 8}
    assert beat.after(10, beat.batch).totals["skipped"] == 9

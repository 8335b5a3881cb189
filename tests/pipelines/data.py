"""Import rows for the tests: good ones, and bad ones of every kind, each bad row knowing the
field it must be rejected on. Every row carries its number as ``payload.n``."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tocsin.abc import Store
from tocsin.domain import Status

N_PATTERN = re.compile(r'(?:"n": ?|"nr-)(\d+)')
"""Finds a row's number in its text (``payload.n``, or ``ordering_key`` ``nr-<n>``)."""

BAD_KINDS: dict[str, str] = {
    "malformed": "body",        # not JSON at all
    "no_payload": "payload",    # none of payload, payload_text, payload_base64
    "naive_due": "due_at",      # a due time without an offset
    "past_due": "due_at",       # far before the grace window
    "unknown_channel": "channel",
    "extra_field": "colour",    # a field the API does not know
    "negative_delay": "delay",
    "too_big": "payload",       # over max_payload_bytes
    "reused_key": "key",        # a key given before with another request
}


@dataclass
class Rows:
    """The lines of a JSON-lines file and what must become of them."""

    lines: list[str] = field(default_factory=list)
    good: set[int] = field(default_factory=set)
    bad: dict[int, str] = field(default_factory=dict)
    """n → the field it is rejected on."""
    pairs: list[tuple[int, int]] = field(default_factory=list)
    """Rows giving one key with different requests, (early, late): whichever is written
    first is stored, the other rejected on ``key`` (listed here as the late one)."""

    def settle(self, stored: set[int]) -> tuple[set[int], dict[int, str]]:
        """The good rows and the bad ones, given which row of each pair was stored."""
        good, bad = set(self.good), dict(self.bad)
        for early, late in self.pairs:
            if late in stored and early not in stored:
                good.discard(early)
                good.add(late)
                del bad[late]
                bad[early] = "key"
        return good, bad


def _bad(kind: str, n: int) -> str:
    row: dict[str, Any] = {"channel": "out", "payload": {"n": n}, "delay": 3600}
    if kind == "malformed":
        return '{"channel": "out", "payload": {"n": ' + str(n) + '}, oops'
    if kind == "no_payload":
        del row["payload"]
        row["ordering_key"] = f"nr-{n}"
    if kind == "naive_due":
        del row["delay"]
        row["due_at"] = "2099-01-01T09:00:00"
    elif kind == "past_due":
        del row["delay"]
        row["due_at"] = "2001-01-01T09:00:00Z"
    elif kind == "unknown_channel":
        row["channel"] = "nowhere"
    elif kind == "extra_field":
        row["colour"] = "red"
    elif kind == "negative_delay":
        row["delay"] = -5
    elif kind == "too_big":
        row["payload"] = {"n": n, "pad": "x" * 2000}
    return json.dumps(row)


def make_rows(total: int, *, bad_share: float = 0.01) -> Rows:
    """``total`` rows; ``bad_share`` of them bad for each kind in :data:`BAD_KINDS`. A reused
    key's first use is a good row early in the file, its second use a bad row late in it (so
    that they land in different batches and the store, not the batch, refuses it)."""
    rows = Rows()
    per_kind = max(1, int(total * bad_share))
    kinds = [k for k in BAD_KINDS for _ in range(per_kind)]
    stride = total // len(kinds)
    bad_at = {i * stride + stride // 2: kind for i, kind in enumerate(kinds)}
    reused = 0
    for n in range(total):
        kind = bad_at.get(n)
        if kind == "reused_key":
            rows.lines.append(json.dumps({"channel": "out", "payload": {"n": n}, "delay": 3600,
                                          "key": f"reused-{reused}"}))
            reused += 1
        elif kind is not None:
            rows.lines.append(_bad(kind, n))
        if kind is not None:
            rows.bad[n] = BAD_KINDS[kind]
            continue
        row: dict[str, Any] = {"channel": "out", "payload": {"n": n}, "delay": 3600}
        rows.lines.append(json.dumps(row))
        rows.good.add(n)
    # the first uses of the reused keys: good rows at the start of the file
    for i in range(reused):
        n = total + i
        rows.lines.insert(i, json.dumps({"channel": "out", "payload": {"n": n}, "delay": 60,
                                         "key": f"reused-{i}"}))
        rows.good.add(n)
    late = sorted(n for n, kind in bad_at.items() if kind == "reused_key")
    rows.pairs = [(total + i, n) for i, n in enumerate(late)]
    return rows


def stored_numbers(store: Store) -> list[int]:
    """``payload.n`` of every stored schedule (PENDING), with repeats."""
    out: list[int] = []
    after: str | None = None
    while True:
        page = store.list_schedules(status=Status.PENDING, after_id=after, limit=10_000)
        if not page:
            return out
        out.extend(json.loads(s.payload)["n"] for s in page)
        after = page[-1].id


def read_rejects(folder: str) -> Iterator[dict[str, Any]]:
    """The records of a rejects folder."""
    from pathlib import Path

    for part in sorted(Path(folder).glob("*.json")):
        for line in part.read_text().splitlines():
            yield json.loads(line)

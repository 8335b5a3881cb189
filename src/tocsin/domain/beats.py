"""The recurring expander's heartbeat: what it writes with ``store.beat("expander", info=...)``
after each batch.

Schema (version 1)::

    {"v": 1, "batch_id": int,
     "batch":  {"recurring": int, "firings": int, "messages": int, "skipped": int},
     "totals": {the same keys, summed over every batch since the store was created}}

The unversioned form written before (``totals`` a list in that key order) is read too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EXPANDER_BEAT_KEYS", "EXPANDER_BEAT_VERSION", "ExpanderBeat"]

EXPANDER_BEAT_VERSION = 1
EXPANDER_BEAT_KEYS = ("recurring", "firings", "messages", "skipped")
"""What an expansion batch counts: recurring schedules moved on, firings, messages, skipped."""


def _counts(values: Any) -> dict[str, int]:
    if isinstance(values, Mapping):
        return {k: int(values.get(k, 0)) for k in EXPANDER_BEAT_KEYS}
    if isinstance(values, list | tuple) and len(values) == len(EXPANDER_BEAT_KEYS):
        return {k: int(v) for k, v in zip(EXPANDER_BEAT_KEYS, values, strict=True)}
    return dict.fromkeys(EXPANDER_BEAT_KEYS, 0)


@dataclass(frozen=True, kw_only=True, slots=True)
class ExpanderBeat:
    """One expander heartbeat: the last batch's counts and the running totals."""

    batch_id: int
    batch: Mapping[str, int] = field(default_factory=lambda: _counts(None))
    totals: Mapping[str, int] = field(default_factory=lambda: _counts(None))

    def after(self, batch_id: int, batch: Mapping[str, int]) -> ExpanderBeat:
        """The beat of the next batch: its counts, added to these totals."""
        counts = _counts(batch)
        return ExpanderBeat(batch_id=batch_id, batch=counts,
                            totals={k: self.totals[k] + counts[k] for k in EXPANDER_BEAT_KEYS})

    def to_info(self) -> dict[str, Any]:
        """As stored (version :data:`EXPANDER_BEAT_VERSION`)."""
        return {"v": EXPANDER_BEAT_VERSION, "batch_id": self.batch_id,
                "batch": dict(self.batch), "totals": dict(self.totals)}

    @classmethod
    def from_info(cls, info: Mapping[str, Any] | None) -> ExpanderBeat:
        """A stored beat (this version or the unversioned one); no beat yet: all zeros."""
        if not info:
            return cls(batch_id=-1)
        return cls(batch_id=int(info.get("batch_id", -1)), batch=_counts(info.get("batch")),
                   totals=_counts(info.get("totals")))

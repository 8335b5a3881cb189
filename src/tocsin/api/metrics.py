"""Placeholder until the API lands."""
from __future__ import annotations
from typing import Any
def beat_info(**kw: Any) -> dict[str, Any]:
    t = kw["tally"]
    return {"batch_id": kw["batch_id"], "batch_ms": kw["batch_ms"], "delivered": t.delivered}

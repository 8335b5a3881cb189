"""Store calls retried while the store does not answer: :func:`retrying`, for the dispatcher's
claims and acknowledgements and the pipelines' writes alike."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

from tocsin.clock import Clock, SystemClock
from tocsin.errors import StoreError

__all__ = ["STORE_RETRY_S", "retrying"]

T = TypeVar("T")
log = logging.getLogger("tocsin.store")
STORE_RETRY_S = 90.0
"""How long a claim or an acknowledgement keeps retrying a store that does not answer (a
database restart, a fail-over) before the task fails and Spark takes over."""


def retrying(work: Callable[[], T], *, what: str, clock: Clock | None = None,
             budget_s: float = STORE_RETRY_S) -> T:
    """``work()``, retried with back-off (0.1 s doubling to 5 s) while the store raises
    :class:`~tocsin.errors.StoreError`, for up to ``budget_s`` of ``clock``'s time (the system
    clock by default; a manual clock's waits are jumps). Every store write the dispatcher
    makes is safe to repeat: claims replay by epoch, acknowledgements are fenced."""
    clock = clock or SystemClock()
    deadline = clock.now_ms() + int(budget_s * 1000)
    pause_ms = 100
    while True:
        try:
            return work()
        except StoreError as exc:
            now = clock.now_ms()
            if now + pause_ms > deadline:
                raise
            log.warning("%s: store unavailable, retrying in %.1fs: %s", what, pause_ms / 1000,
                        exc)
            clock.sleep_until(now + pause_ms)
            pause_ms = min(pause_ms * 2, 5_000)

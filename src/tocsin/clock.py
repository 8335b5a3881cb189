"""Clocks: every piece of Tocsin that needs "now" asks one, so tests can move time.

Instants are integer milliseconds since the Unix epoch, UTC, everywhere inside Tocsin.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Literal

__all__ = ["Clock", "ManualClock", "SystemClock", "from_ms", "iso_ms", "to_ms"]

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Clock:
    """The wall clock; subclasses may move time by hand."""

    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch, UTC."""
        return time.time_ns() // 1_000_000

    def now(self) -> datetime:
        """The current instant as an aware UTC datetime."""
        return from_ms(self.now_ms())

    def sleep_until(self, ms: int) -> None:
        """Wait until the clock reads ``ms`` (at once if it already does)."""
        delay = ms - self.now_ms()
        if delay > 0:
            time.sleep(delay / 1000)


class SystemClock(Clock):
    """The real clock."""


class ManualClock(Clock):
    """A clock that only moves when told to: for tests and simulations."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now

    def advance(self, ms: int) -> int:
        """Move time forward by ``ms`` milliseconds and return the new now."""
        if ms < 0:
            raise ValueError("a clock never runs backwards")
        with self._lock:
            self._now += ms
            return self._now

    def set(self, ms: int) -> None:
        """Jump to ``ms`` (forward only)."""
        with self._lock:
            if ms < self._now:
                raise ValueError("a clock never runs backwards")
            self._now = ms

    def sleep_until(self, ms: int) -> None:
        """Waiting on a manual clock is a jump: time moves to ``ms`` at once."""
        with self._lock:
            self._now = max(self._now, ms)

    def __getstate__(self) -> dict[str, int]:
        """Pickled as its time (a Spark job hands its clock to the executors): a copy that
        moves on its own."""
        return {"now": self.now_ms()}

    def __setstate__(self, state: dict[str, int]) -> None:
        self.__init__(state["now"])  # type: ignore[misc]


def to_ms(instant: datetime) -> int:
    """An aware datetime as UTC milliseconds; naive datetimes are refused."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError("naive datetime: an instant needs a UTC offset")
    return (instant - _EPOCH) // timedelta(milliseconds=1)


def from_ms(ms: int) -> datetime:
    """UTC milliseconds as an aware UTC datetime."""
    return _EPOCH + timedelta(milliseconds=ms)


@lru_cache(maxsize=4096)
def iso_ms(ms: int, timespec: Literal["milliseconds", "seconds"] = "milliseconds") -> str:
    """UTC milliseconds as RFC 3339 with a ``Z``: the one form Tocsin writes instants in
    (cached: a burst shares few due times)."""
    return from_ms(ms).isoformat(timespec=timespec).replace("+00:00", "Z")

"""The defaults the domain's values need, and Tocsin's one unit conversion.

The settings (:class:`tocsin.config.Settings`) take these defaults from here, and so do the
value objects that carry the same knobs (:class:`~tocsin.domain.RetryPolicy`,
:class:`~tocsin.domain.NewSchedule`); every other default is its setting's, written in
config.py, and the dispatcher's options read theirs from the settings' fields.
"""

from __future__ import annotations

__all__ = [
    "BUCKETS",
    "KEY_RETENTION_MS",
    "MAX_ATTEMPTS",
    "RETRY_BASE_MS",
    "RETRY_CAP_MS",
    "ms",
    "seconds",
]

BUCKETS = 64
"""Buckets of a new store: the unit of parallel claiming, fixed when the store is created."""
RETRY_BASE_MS = 1_000
"""The first retry's back-off ceiling (it doubles per attempt)."""
RETRY_CAP_MS = 300_000
"""The longest back-off between two attempts."""
MAX_ATTEMPTS = 8
"""Attempts before a schedule is dead."""
KEY_RETENTION_MS = 7 * 24 * 3600 * 1000
"""How long a completed task key still answers repeats: a week."""


def ms(seconds: float) -> int:
    """Seconds (a setting, an API field) as Tocsin's integer milliseconds, truncated."""
    return int(seconds * 1000)


def seconds(ms_: int) -> float:
    """Milliseconds as seconds, as the API answers durations."""
    return ms_ / 1000

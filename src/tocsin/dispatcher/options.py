"""The dispatcher's options, as they travel through Spark's string-valued source options.

Each default is the setting's (:class:`~tocsin.config.Settings`, in milliseconds where the
setting is in seconds), read from its field, never written twice; the options without a
setting (``idle_beat_ms``, ``relay``, ``run``) have theirs here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tocsin.config import Settings
from tocsin.dispatcher.breaker import BreakerPolicy
from tocsin.dispatcher.destination import EngineSettings
from tocsin.dispatcher.knobs import CLAIM_ROWS
from tocsin.domain import RetryPolicy
from tocsin.domain.defaults import ms

__all__ = ["DispatchOptions"]


def _setting(name: str) -> Any:
    """The default of the setting ``name`` (as written in config.py, not the environment's)."""
    return Settings.model_fields[name].default


def _setting_ms(name: str) -> int:
    """The default of the setting ``name``, in seconds, as milliseconds."""
    return ms(_setting(name))


@dataclass(frozen=True, kw_only=True, slots=True)
class DispatchOptions:
    """Everything the reader and the writer need, picklable and flat."""

    store_url: str
    buckets: int = _setting("buckets")
    partitions: int = _setting("partitions")
    batch_cap: int = _setting("batch_cap")
    lease_ms: int = _setting_ms("lease_seconds")
    retry_base_ms: int = _setting_ms("retry_base_seconds")
    retry_cap_ms: int = _setting_ms("retry_cap_seconds")
    max_attempts: int = _setting("max_attempts")
    idle_beat_ms: int = 5_000
    """The source beats `dispatcher-source` at least this often, even when nothing is due."""
    horizon_ms: int = _setting_ms("recurring_horizon_seconds")
    """Recurring firings up to this far ahead are expanded into schedules."""
    max_per_minute: int = _setting("recurring_max_per_minute")
    """A recurring schedule making more messages a minute than this is failed, not expanded."""
    max_pending: int = _setting("tenant_max_pending")
    """A tenant's pending cap: expansion schedules no firing past it (0: no cap)."""
    hand_over_ms: int = _setting_ms("hand_over_seconds")
    """A task's hand-over window (:mod:`tocsin.dispatcher.handover`); 0: no window, each
    schedule goes out with the micro-batch after its due time."""
    keep_warm_ms: int = _setting_ms("keep_warm_seconds")
    """An idle dispatcher still runs a batch this often (0: never, the default). Spark stops
    Python workers idle for a minute; a new one starts warm from Tocsin's worker daemon
    (:mod:`tocsin.spark.daemon`), and after a quiet spell a batch starts ahead of the next due
    schedule (:data:`~tocsin.dispatcher.core.WAKE_AHEAD_MS`)."""
    send_deadline_ms: int = _setting_ms("send_timeout_max_seconds")
    """The operator's cap on one send (``send_timeout_max_seconds``); the engine stops waiting a
    little after it."""
    lane_room_ms: int = _setting_ms("lane_seconds")
    """A destination's queue holds about this much of its measured sending
    (:mod:`.destination`)."""
    lane_min_rows: int = _setting("lane_min_rows")
    """The smallest room of a destination's queue."""
    send_threads: int = _setting("channel_threads")
    """Threads of the delivery engine's send pool (:mod:`.workers`), however many
    destinations."""
    breaker_failures: int = _setting("breaker_failures")
    """Failed attempts in a row that open a destination's breaker."""
    breaker_open_ms: int = _setting_ms("breaker_open_seconds")
    """How long an opened breaker first holds its destination."""
    breaker_max_open_ms: int = _setting_ms("breaker_max_open_seconds")
    """The longest a breaker holds between probes."""
    relay: int = 0
    """1 in the relay query, which covers the main query's gaps between windows."""
    run: str = ""
    """This dispatcher run's id (:mod:`tocsin.dispatcher.runs`); empty: epochs are taken
    without a run, and only the lease frees a dead dispatcher's claims."""
    grid_ms: int = 0
    """How far this dispatcher's window grid is shifted
    (:func:`~tocsin.dispatcher.handover.grid_shift_ms` of its membership slot)."""
    run_beat: int = 0
    """1 when a :class:`~tocsin.dispatcher.runs.RunBeat` thread of the dispatcher process
    beats the run and looks at the membership: the source then does neither (the two did
    each a second, a write and a look at the server's locks: an idle dispatcher's store work,
    twice)."""

    @classmethod
    def from_settings(cls, settings: Settings) -> DispatchOptions:
        """Options from Tocsin's settings."""
        return cls(store_url=settings.store_url, buckets=settings.buckets,
                   partitions=settings.partitions, batch_cap=settings.batch_cap,
                   lease_ms=ms(settings.lease_seconds),
                   retry_base_ms=ms(settings.retry_base_seconds),
                   retry_cap_ms=ms(settings.retry_cap_seconds),
                   max_attempts=settings.max_attempts,
                   hand_over_ms=ms(settings.hand_over_seconds),
                   keep_warm_ms=ms(settings.keep_warm_seconds),
                   horizon_ms=ms(settings.recurring_horizon_seconds),
                   send_deadline_ms=ms(settings.send_timeout_max_seconds),
                   lane_room_ms=ms(settings.lane_seconds), lane_min_rows=settings.lane_min_rows,
                   send_threads=settings.channel_threads,
                   breaker_failures=settings.breaker_failures,
                   breaker_open_ms=ms(settings.breaker_open_seconds),
                   breaker_max_open_ms=ms(settings.breaker_max_open_seconds),
                   max_per_minute=settings.recurring_max_per_minute,
                   max_pending=settings.tenant_max_pending)

    def to_spark(self) -> dict[str, str]:
        """As Spark source/sink options (strings)."""
        return {k: str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_spark(cls, options: Mapping[str, str]) -> DispatchOptions:
        """From Spark's (case-insensitive) options."""
        lowered = {k.lower(): v for k, v in options.items()}
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = lowered.get(f.name.lower())
            if raw is not None:
                values[f.name] = raw if f.type == "str" else (
                    float(raw) if f.type == "float" else int(raw))
        return cls(**values)  # type: ignore[arg-type]

    @property
    def engine(self) -> EngineSettings:
        """The delivery engine's settings these options describe."""
        return EngineSettings(
            room_s=self.lane_room_ms / 1000, min_rows=self.lane_min_rows,
            max_rows=max(self.lane_min_rows, 2 * CLAIM_ROWS), chunk_rows=CLAIM_ROWS,
            send_deadline_ms=self.send_deadline_ms, max_wait_ms=self.lease_ms // 2,
            send_threads=self.send_threads,
            breaker=BreakerPolicy(failures=self.breaker_failures, open_ms=self.breaker_open_ms,
                                  max_open_ms=self.breaker_max_open_ms))

    @property
    def retry(self) -> RetryPolicy:
        """The retry policy these options describe."""
        return RetryPolicy(base_ms=self.retry_base_ms, cap_ms=self.retry_cap_ms,
                           max_attempts=self.max_attempts)

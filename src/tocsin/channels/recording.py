"""Recording channel: a fake that keeps what it is sent in this process's memory.

For tests of logic (``deliver`` with an in-memory store) and for users' own tests.
Config: ``fail``: ``none`` (default), ``retry`` or ``reject`` — the outcome of every delivery
but the ones it lets through; ``fail_first``: how many deliveries to fail before succeeding.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["RecordingChannel", "RecordingConfig", "recorded", "reset"]

_RECORDED: dict[str, list[Envelope]] = defaultdict(list)
_LOCK = threading.Lock()


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordingConfig:
    """A recording channel's configuration."""

    fail: str = "none"
    fail_first: int = 0

    def check(self) -> None:
        """Reject what cannot work."""
        if self.fail not in ("none", "retry", "reject"):
            raise ValidationError("config.fail", "must be none, retry or reject")


def recorded(channel: str) -> list[Envelope]:
    """What the channel named ``channel`` accepted in this process, in order."""
    with _LOCK:
        return list(_RECORDED[channel])


def reset() -> None:
    """Forget everything recorded."""
    with _LOCK:
        _RECORDED.clear()


class RecordingChannel(Channel):
    """Records accepted envelopes; fails as configured."""

    def __init__(self, spec: ChannelSpec) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(RecordingConfig, spec.config)
        self._failed = 0

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        results = []
        for env in envelopes:
            if self.config.fail != "none" and self._failed < self.config.fail_first:
                self._failed += 1
                outcome = Outcome.RETRY if self.config.fail == "retry" else Outcome.REJECTED
                results.append(Result(delivery_id=env.delivery_id, outcome=outcome,
                                      error=f"recording: configured to {self.config.fail}"))
                continue
            with _LOCK:
                _RECORDED[self.spec.name].append(env)
            results.append(Result(delivery_id=env.delivery_id, outcome=Outcome.DELIVERED))
        return results

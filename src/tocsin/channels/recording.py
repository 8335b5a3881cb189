"""Recording channel: a fake that keeps what it accepts in this process's memory.

For tests of logic (``deliver`` with an in-memory store) and for users' own tests; read what
it accepted with :func:`recorded`, forget it with :func:`reset`.

Config (all optional):

``fail``
    ``none`` (default: accept everything), ``retry`` or ``reject``: the outcome of a delivery
    that fails.
``fail_first``
    How many deliveries to fail before the rate applies (counted per channel name in this
    process; default 0).
``fail_rate``
    The chance, 0 to 1, that each later delivery fails. Default: 1 when ``fail_first`` is 0
    (``fail: retry`` alone fails everything), else 0 (fail the first n, then accept).
``seed``
    Makes ``fail_rate`` deterministic: an attempt's fate is a hash of the seed, its delivery id
    and its attempt, the same in every process and whatever the batching.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["RecordingChannel", "RecordingConfig", "recorded", "reset"]

_RECORDED: dict[str, list[Envelope]] = defaultdict(list)
_FAILED: dict[str, int] = defaultdict(int)
_LOCK = threading.Lock()
_FAILURES = {"retry": Outcome.RETRY, "reject": Outcome.REJECTED}


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordingConfig:
    """A recording channel's configuration (see the module's docstring)."""

    fail: str = "none"
    fail_first: int = 0
    fail_rate: float | None = None
    seed: int | None = None

    def check(self) -> None:
        """Reject what cannot work."""
        if self.fail not in ("none", *_FAILURES):
            raise ValidationError("config.fail",
                                  f"must be none, retry or reject, not {self.fail!r}")
        if self.fail_first < 0:
            raise ValidationError("config.fail_first", "must not be negative")
        if self.fail_rate is not None and not 0 <= self.fail_rate <= 1:
            raise ValidationError("config.fail_rate", "must be between 0 and 1")

    @property
    def rate(self) -> float:
        """The failure rate after the first ``fail_first`` deliveries."""
        if self.fail_rate is not None:
            return self.fail_rate
        return 1.0 if self.fail_first == 0 else 0.0


def recorded(channel: str) -> list[Envelope]:
    """What the channel named ``channel`` accepted in this process, in order."""
    with _LOCK:
        return list(_RECORDED[channel])


def reset() -> None:
    """Forget everything recorded and every failure counted."""
    with _LOCK:
        _RECORDED.clear()
        _FAILED.clear()


class RecordingChannel(Channel):
    """Records accepted envelopes; fails as configured."""

    def __init__(self, spec: ChannelSpec) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(RecordingConfig, spec.config)
        self._rng = random.Random()

    def _draw(self, env: Envelope) -> float:
        if self.config.seed is None:
            return self._rng.random()
        digest = hashlib.blake2b(f"{self.config.seed}:{env.delivery_id}:{env.attempt}".encode(),
                                 digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def _fails(self, env: Envelope) -> bool:
        if self.config.fail == "none":
            return False
        name = self.spec.name
        if _FAILED[name] < self.config.fail_first:
            _FAILED[name] += 1
            return True
        return self._draw(env) < self.config.rate

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        results = []
        failure = _FAILURES.get(self.config.fail, Outcome.RETRY)
        error = f"recording: configured to {self.config.fail}"
        with _LOCK:
            for env in envelopes:
                if self._fails(env):
                    results.append(Result(delivery_id=env.delivery_id, outcome=failure,
                                          error=error))
                else:
                    _RECORDED[self.spec.name].append(env)
                    results.append(Result(delivery_id=env.delivery_id,
                                          outcome=Outcome.DELIVERED))
        return results

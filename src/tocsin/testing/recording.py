"""Recording channel: a fake that keeps what it accepts in memory, in a :class:`Recordings`.

For tests of logic (the dispatcher core with a :class:`~tocsin.clock.ManualClock`) and for users'
own tests; never a kind of production: a process accepts ``recording`` channels only once
:func:`use_recording_channels` registered the kind. A channel built by a registry records there
(``LocalDispatcher(..., recordings=...)``, :meth:`Recordings.build`); one built from its spec
alone records in the process's :data:`DEFAULT_RECORDINGS`, read with :func:`recorded` and
cleared with :func:`reset`.

Config (all optional):

``fail``
    ``none`` (default: accept everything), ``retry`` or ``reject``: the outcome of a delivery
    that fails (:class:`FailMode`).
``fail_first``
    How many deliveries to fail before the rate applies (counted per channel name in the
    registry; default 0).
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
from enum import StrEnum

from tocsin.abc import Channel
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["DEFAULT_RECORDINGS", "FailMode", "RecordingChannel", "RecordingConfig", "Recordings",
           "recorded", "reset", "use_recording_channels"]


class FailMode(StrEnum):
    """How a recording channel's failing deliveries fail."""

    NONE = "none"
    """Nothing fails: every delivery is recorded."""
    RETRY = "retry"
    """A transient failure: the dispatcher retries with back-off."""
    REJECT = "reject"
    """A permanent refusal: the schedule dies at once."""


_OUTCOMES = {FailMode.RETRY: Outcome.RETRY, FailMode.REJECT: Outcome.REJECTED}


class Recordings:
    """What recording channels accepted, by channel name in order, and how many deliveries
    each has failed so far (for ``fail_first``). Thread-safe."""

    def __init__(self) -> None:
        self._recorded: dict[str, list[Envelope]] = defaultdict(list)
        self._failed: dict[str, int] = defaultdict(int)
        self.lock = threading.Lock()

    def recorded(self, channel: str) -> list[Envelope]:
        """What the channel named ``channel`` accepted, in order."""
        with self.lock:
            return list(self._recorded[channel])

    def build(self, spec: ChannelSpec) -> RecordingChannel:
        """A recording channel for ``spec`` that records here."""
        return RecordingChannel(spec, self)

    def reset(self) -> None:
        """Forget everything recorded and every failure counted."""
        with self.lock:
            self._recorded.clear()
            self._failed.clear()

    def _record(self, channel: str, env: Envelope) -> None:
        self._recorded[channel].append(env)

    def _fail_first(self, channel: str, first: int) -> bool:
        if self._failed[channel] < first:
            self._failed[channel] += 1
            return True
        return False


DEFAULT_RECORDINGS = Recordings()
"""The registry of recording channels built from a spec alone (as the Spark dispatcher builds
them in its worker processes)."""


def recorded(channel: str) -> list[Envelope]:
    """What the channel named ``channel`` accepted in :data:`DEFAULT_RECORDINGS`, in order."""
    return DEFAULT_RECORDINGS.recorded(channel)


def reset() -> None:
    """Clear :data:`DEFAULT_RECORDINGS`."""
    DEFAULT_RECORDINGS.reset()


@dataclass(frozen=True, kw_only=True, slots=True)
class RecordingConfig:
    """A recording channel's configuration (see the module's docstring)."""

    fail: str = FailMode.NONE.value
    fail_first: int = 0
    fail_rate: float | None = None
    seed: int | None = None

    def check(self) -> None:
        """Reject what cannot work."""
        if self.fail not in FailMode.__members__.values():
            *most, last = FailMode
            raise ValidationError("config.fail", f"must be {', '.join(most)} or {last}, "
                                                 f"not {self.fail!r}")
        if self.fail_first < 0:
            raise ValidationError("config.fail_first", "must not be negative")
        if self.fail_rate is not None and not 0 <= self.fail_rate <= 1:
            raise ValidationError("config.fail_rate", "must be between 0 and 1")

    @property
    def mode(self) -> FailMode:
        """``fail`` as its enum."""
        return FailMode(self.fail)

    @property
    def rate(self) -> float:
        """The failure rate after the first ``fail_first`` deliveries."""
        if self.fail_rate is not None:
            return self.fail_rate
        return 1.0 if self.fail_first == 0 else 0.0


class RecordingChannel(Channel):
    """Records accepted envelopes in ``recordings``; fails as configured."""

    def __init__(self, spec: ChannelSpec, recordings: Recordings | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(RecordingConfig, spec.config)
        self.recordings = recordings or DEFAULT_RECORDINGS
        self._rng = random.Random()

    def _draw(self, env: Envelope) -> float:
        if self.config.seed is None:
            return self._rng.random()
        digest = hashlib.blake2b(f"{self.config.seed}:{env.delivery_id}:{env.attempt}".encode(),
                                 digest_size=8).digest()
        return int.from_bytes(digest, "big") / 2**64

    def _fails(self, env: Envelope) -> bool:
        if self.config.mode is FailMode.NONE:
            return False
        if self.recordings._fail_first(self.spec.name, self.config.fail_first):
            return True
        return self._draw(env) < self.config.rate

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        results = []
        failure = _OUTCOMES.get(self.config.mode, Outcome.RETRY)
        error = f"recording: configured to {self.config.fail}"
        with self.recordings.lock:
            for env in envelopes:
                if self._fails(env):
                    results.append(Result(delivery_id=env.delivery_id, outcome=failure,
                                          error=error))
                else:
                    self.recordings._record(self.spec.name, env)
                    results.append(Result(delivery_id=env.delivery_id,
                                          outcome=Outcome.DELIVERED))
        return results


def use_recording_channels() -> None:
    """Accept ``recording`` channels in this process (registration through the API, building
    them from a spec, recording in :data:`DEFAULT_RECORDINGS`): a test asks for it; a
    production process never does."""
    from tocsin.channels import register_kind

    register_kind(ChannelKind.RECORDING, __name__, RecordingChannel.__name__,
                  RecordingConfig.__name__)

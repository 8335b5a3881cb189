"""The ``example_lines`` kind: each envelope as one JSON line over TCP, acknowledged.

A plug-in channel is a :class:`tocsin.abc.Channel` subclass with a ``config_class``, named by
an entry point of the ``tocsin.channels`` group (this package's ``pyproject.toml``). Config:
``address`` (``host:port``, required; checked by the destination policy's broker check),
``token`` (optional, write-only: sent first as ``AUTH <token>``), ``timeout`` seconds (default
5, capped by the operator's send limit).

The protocol: the channel writes ``AUTH <token>`` (when set), then one line per envelope (its
JSON, :meth:`~tocsin.domain.Envelope.to_json_bytes`); the server answers ``ok <delivery id>``
per line, or ``no <delivery id> <reason>`` for a line it refuses for good.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Sequence
from dataclasses import dataclass

from tocsin.abc import Channel
from tocsin.channels.addresses import check_broker
from tocsin.channels.limits import SendLimits, current_limits
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["LinesChannel", "LinesConfig"]


@dataclass(frozen=True, kw_only=True, slots=True)
class LinesConfig:
    """An ``example_lines`` channel's configuration."""

    address: str
    """``host:port`` of the server."""
    token: str | None = None
    """Sent first as ``AUTH <token>`` (write-only: its name says it is a secret)."""
    timeout: float = 5.0
    """Seconds one send may take; capped by the operator's send limit."""

    def check(self) -> None:
        """Reject what cannot work (``parse_config`` calls it)."""
        host, sep, port = self.address.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValidationError("config.address", "must be host:port")
        if not 0 < self.timeout <= 60:
            raise ValidationError("config.timeout", "must be more than 0 and at most 60")

    def admit(self, policy: DestinationPolicy) -> None:
        """The destination policy hook: the server is a broker like any other."""
        check_broker(self.address, policy, field="config.address")


class LinesChannel(Channel):
    """One connection per send; every line acknowledged before the send answers."""

    config_class = LinesConfig

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(LinesConfig, spec.config)
        self.config.admit(policy or current_policy())
        self.timeout_s = (limits or current_limits()).timeout(self.config.timeout)

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if not envelopes:
            return []
        deadline = time.monotonic() + self.timeout_s
        host, _, port = self.config.address.rpartition(":")
        results: dict[str, Result] = {}
        try:
            with socket.create_connection((host.strip("[]"), int(port)),
                                          timeout=self.timeout_s / 2) as sock:
                lines = [b"AUTH " + self.config.token.encode()] if self.config.token else []
                lines += [env.to_json_bytes() for env in envelopes]
                sock.sendall(b"\n".join(lines) + b"\n")
                answers = sock.makefile("rb")
                for _ in envelopes:
                    sock.settimeout(max(deadline - time.monotonic(), 0.001))
                    verdict, _, rest = answers.readline().decode().strip().partition(" ")
                    delivery_id, _, reason = rest.partition(" ")
                    if verdict == "ok":
                        results[delivery_id] = Result(delivery_id, Outcome.DELIVERED)
                    elif verdict == "no":
                        results[delivery_id] = Result(delivery_id, Outcome.REJECTED,
                                                      f"lines: {reason}"[:200])
                    else:
                        break  # the connection ended: the rest are retried
        except OSError as exc:
            error = f"lines: {type(exc).__name__}"
            return [results.get(e.delivery_id) or Result(e.delivery_id, Outcome.RETRY, error)
                    for e in envelopes]
        return [results.get(e.delivery_id) or Result(e.delivery_id, Outcome.RETRY,
                                                     "lines: no answer") for e in envelopes]

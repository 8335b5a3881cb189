"""File channel: JSON lines appended to one file per channel."""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result

__all__ = ["FileChannel"]


class FileChannel(Channel):
    """Appends each envelope as one JSON line, a whole batch in one write under a lock."""

    def __init__(self, spec: ChannelSpec) -> None:
        self.spec = spec
        self.path = str(spec.config["path"])

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        blob = b"".join(e.to_json_bytes() + b"\n" for e in envelopes)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                os.write(fd, blob)
            finally:
                os.close(fd)
        except OSError as exc:
            return [Result(delivery_id=e.delivery_id, outcome=Outcome.RETRY, error=str(exc))
                    for e in envelopes]
        return [Result(delivery_id=e.delivery_id, outcome=Outcome.DELIVERED) for e in envelopes]

"""File channel: JSON lines appended to one file per channel.

Config: ``path`` (default ``$TOCSIN_HOME/channels/<name>.jsonl``, made absolute when the
channel is registered). Several executor processes append to one file: each batch is one
``write`` on an ``O_APPEND`` descriptor under an exclusive ``flock``, so lines never interleave.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tocsin.abc import Channel
from tocsin.domain import ChannelSpec, Envelope, Outcome, Result

__all__ = ["FileChannel", "FileConfig", "default_path"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FileConfig:
    """A file channel's configuration."""

    path: str | None = None

    def normalised(self) -> dict[str, Any]:
        """The config to store: the path made absolute."""
        return {"path": str(Path(self.path).resolve())} if self.path else {}


def default_path(name: str) -> Path:
    """Where a file channel writes when its config names no path."""
    return (Path(os.environ.get("TOCSIN_HOME", ".tocsin")) / "channels" / f"{name}.jsonl").resolve()


class FileChannel(Channel):
    """Appends each envelope as one JSON line, a whole batch in one write under a lock."""

    def __init__(self, spec: ChannelSpec) -> None:
        self.spec = spec
        path = spec.config.get("path")
        self.path = str(path) if path else str(default_path(spec.name))
        Path(self.path).parent.mkdir(parents=True, exist_ok=True)

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

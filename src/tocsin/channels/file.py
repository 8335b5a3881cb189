"""File channel: JSON lines appended to one file per channel.

Config: ``path`` (default ``<home>/channels/<name>.jsonl``, ``home`` being the setting
``TOCSIN_HOME``, ``.tocsin`` by default; made absolute when the channel is registered) and
``fsync`` (default false: a batch survives the crash of any process once written, and a crash
of the machine only once fsynced). Each line is :meth:`~tocsin.domain.Envelope.to_json_bytes`.

Several executor processes append to one file: each batch is one ``write`` of one blob on an
``O_APPEND`` descriptor under an exclusive ``flock``, so lines never interleave. Any
``OSError`` answers RETRY for the whole batch.
"""

from __future__ import annotations

import contextlib
import errno
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
    """Where to append; None for :func:`default_path`."""
    fsync: bool = False
    """Whether to ``fsync`` after each batch, before answering DELIVERED."""

    def normalised(self) -> dict[str, Any]:
        """The config to store: the path made absolute."""
        config: dict[str, Any] = {"path": str(Path(self.path).resolve())} if self.path else {}
        return {**config, "fsync": True} if self.fsync else config


def default_path(name: str) -> Path:
    """Where a file channel writes when its config names no path."""
    from tocsin.config import Settings

    return (Settings().home / "channels" / f"{name}.jsonl").resolve()


class FileChannel(Channel):
    """Appends each envelope as one JSON line, a whole batch in one write under a lock."""

    def __init__(self, spec: ChannelSpec) -> None:
        self.spec = spec
        path = spec.config.get("path")
        self.path = str(path) if path else str(default_path(spec.name))
        self.fsync = bool(spec.config.get("fsync", False))

    def _open(self) -> int:
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC
        try:
            return os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            return os.open(self.path, flags, 0o644)

    def _append(self, blob: bytes) -> None:
        fd = self._open()
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            start = os.lseek(fd, 0, os.SEEK_END)
            try:
                view = memoryview(blob)
                while view:  # a regular file takes it all at once, unless interrupted or full
                    written = os.write(fd, view)
                    if written == 0:
                        raise OSError(errno.ENOSPC, "no bytes written", self.path)
                    view = view[written:]
                if self.fsync:
                    os.fsync(fd)
            except OSError:
                with contextlib.suppress(OSError):  # leave no torn line behind a retried batch
                    os.ftruncate(fd, start)
                raise
        finally:
            os.close(fd)  # closing releases the lock

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if not envelopes:
            return []
        lines = [e.to_json_bytes() for e in envelopes]
        lines.append(b"")
        try:
            self._append(b"\n".join(lines))
        except OSError as exc:
            error = f"file {self.path}: {exc}"
            return [Result(e.delivery_id, Outcome.RETRY, error) for e in envelopes]
        return [Result(e.delivery_id, Outcome.DELIVERED) for e in envelopes]

"""File channel: JSON lines appended to one file per channel.

Config: ``path`` and ``fsync`` (default false: a batch survives the crash of any process once
written, and a crash of the machine only once fsynced), ``body``. Each line is
:meth:`~tocsin.domain.Envelope.to_json_bytes`, or (``body``) the raw payload or a structured
CloudEvent (:mod:`tocsin.channels.bodies`).

Where it lands is the operator's :class:`~tocsin.channels.policy.DestinationPolicy`: a relative
``path`` is under the first of the ``file_roots`` (default ``$TOCSIN_HOME/channels``, with
``TOCSIN_HOME`` defaulting to ``.tocsin``), an absolute one must lie under one of them, and no
``path`` means ``<first root>/<name>.jsonl``; a tenant other than the default has its own
roots, ``<root>/tenants/<tenant>`` (see
:meth:`~tocsin.channels.policy.DestinationPolicy.for_tenant`). The path is stored as given
(nothing resolved), and every batch opens the file through
:func:`~tocsin.channels.paths.open_append`, which refuses a symlink or hard link below the
root: such a batch is REJECTED.

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
from tocsin.channels.bodies import body_format, check_body, render
from tocsin.channels.paths import OutsideRoots, check_path, open_append, place
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.domain import DEFAULT_TENANT, ChannelSpec, Envelope, Outcome, Result
from tocsin.domain.terms import BodyFormat
from tocsin.errors import ValidationError

__all__ = ["FileChannel", "FileConfig", "default_path"]


@dataclass(frozen=True, kw_only=True, slots=True)
class FileConfig:
    """A file channel's configuration."""

    path: str | None = None
    """Where to append; None for :func:`default_path`."""
    fsync: bool = False
    """Whether to ``fsync`` after each batch, before answering DELIVERED."""
    body: str = "envelope"
    """The body's format (:class:`~tocsin.domain.terms.BodyFormat`); a schedule's wins."""

    def check(self) -> None:
        """Reject what cannot work."""
        check_body(self.body)

    def admit(self, policy: DestinationPolicy) -> dict[str, Any]:
        """The config to store, once the policy admits the path (stored as given)."""
        config: dict[str, Any] = (
            {} if self.path is None else {"path": check_path(self.path, policy)})
        if self.body != BodyFormat.ENVELOPE:
            config["body"] = self.body
        return {**config, "fsync": True} if self.fsync else config


_BROKEN = "a raw body holding a line break cannot be one line of the file"


def _line(env: Envelope, fmt: BodyFormat) -> bytes | None:
    """``env`` as one line in ``fmt``: the envelope, the raw payload (None when it holds a
    line break), or the event in structured mode (a file has no headers, so binary mode is
    written structured too)."""
    if fmt is BodyFormat.ENVELOPE:
        return env.to_json_bytes()
    if fmt is BodyFormat.RAW:
        return None if b"\n" in env.payload or b"\r" in env.payload else env.payload
    return render(env, BodyFormat.CLOUDEVENTS_STRUCTURED).body


def default_path(name: str, policy: DestinationPolicy | None = None) -> Path:
    """Where a file channel writes when its config names no path."""
    return Path((policy or current_policy()).file_roots[0]) / f"{name}.jsonl"


class FileChannel(Channel):
    """Appends each envelope as one JSON line, a whole batch in one write under a lock."""

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None) -> None:
        self.spec = spec
        tenant: str = getattr(spec, "tenant", DEFAULT_TENANT)
        path = spec.config.get("path")
        self.path = str(path) if path else f"{spec.name}.jsonl"
        self.fsync = bool(spec.config.get("fsync", False))
        self.body = BodyFormat(spec.config.get("body", BodyFormat.ENVELOPE))
        self._refused: str | None = None
        try:
            self._root, self._below = place(
                self.path, (policy or current_policy()).for_tenant(tenant))
        except ValidationError as exc:  # registered under another policy: never written
            self._refused = f"file {self.path}: refused: {exc.reason}"

    def _append(self, blob: bytes) -> None:
        fd = open_append(self._root, self._below)
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
        if self._refused:
            return [Result(e.delivery_id, Outcome.REJECTED, self._refused) for e in envelopes]
        lines, refused = [], {}
        for e in envelopes:
            line = _line(e, body_format(e, self.body))
            if line is None:
                refused[e.delivery_id] = Result(e.delivery_id, Outcome.REJECTED, _BROKEN)
            else:
                lines.append(line)
        written = [e for e in envelopes if e.delivery_id not in refused]
        lines.append(b"")
        try:
            if written:
                self._append(b"\n".join(lines))
        except OutsideRoots as exc:
            error = f"file {self.path}: refused: {exc.strerror}"
            return [Result(e.delivery_id, Outcome.REJECTED, error) for e in envelopes]
        except OSError as exc:
            error = f"file {self.path}: {exc.strerror or type(exc).__name__}"
            return [refused.get(e.delivery_id) or Result(e.delivery_id, Outcome.RETRY, error)
                    for e in envelopes]
        return [refused.get(e.delivery_id) or Result(e.delivery_id, Outcome.DELIVERED)
                for e in envelopes]

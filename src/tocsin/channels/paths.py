"""Paths under a root, checked without trusting the file system's names.

:func:`check_path` is the registration check (pure text: no file system access, nothing
resolved, so nothing about the server's files is echoed back): a relative path is taken under
the policy's first root, an absolute one must lie under some root; NUL and control
characters, ``..``, empty names and over-long names are refused, naming ``config.path``.

:func:`open_append` is the delivery-time check: it walks from the root's directory one
component at a time with ``O_NOFOLLOW`` relative to the directory before (``openat``), so a
symlink anywhere below the root, swapped in at any time, is refused rather than followed; the
file must be a regular file with a single link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from pathlib import PurePosixPath

from tocsin.channels.policy import DestinationPolicy
from tocsin.errors import ValidationError

__all__ = ["OutsideRoots", "check_path", "open_append", "place"]

_NAME_MAX = 255
_PATH_MAX = 4096


class OutsideRoots(OSError):
    """The destination escapes the roots (a symlink, a hard link, not a regular file)."""


def _bad(reason: str, field: str) -> ValidationError:
    return ValidationError(field, reason)


def place(path: str, policy: DestinationPolicy, *, field: str = "config.path") -> \
        tuple[str, tuple[str, ...]]:
    """The root ``path`` lies under and its components below it; ValidationError naming
    ``field`` when it is bad, outside every root, or one of Tocsin's own files."""
    root, below = _place(path, policy, field)
    if os.path.join(root, *below) in policy.protected:
        raise _bad("is one of Tocsin's own files", field)
    # Neither in it nor the name itself (a file 'tenants' would stop other tenants' folder
    # being made), in any case (a case-insensitive file system reads TENANTS as tenants).
    if policy.reserved is not None and below[0].casefold() == policy.reserved.casefold():
        raise _bad(f"must not be or lie in '{policy.reserved}/' (in any case), where other "
                   "tenants' files are", field)
    return root, below


def _place(path: str, policy: DestinationPolicy, field: str) -> tuple[str, tuple[str, ...]]:
    if not path:
        raise _bad("must not be empty", field)
    if len(path.encode("utf-8", "surrogatepass")) > _PATH_MAX:
        raise _bad(f"longer than {_PATH_MAX} bytes", field)
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        raise _bad("holds a NUL or another control character", field)
    if path.endswith("/"):
        raise _bad("names a directory, not a file", field)
    parts = PurePosixPath(path).parts
    if ".." in parts:
        raise _bad("must not hold '..'", field)
    if any(len(p.encode("utf-8", "surrogatepass")) > _NAME_MAX for p in parts):
        raise _bad(f"has a name longer than {_NAME_MAX} bytes", field)
    if not PurePosixPath(path).is_absolute():
        below = tuple(p for p in parts if p != ".")
        if not below:
            raise _bad("names no file", field)
        return policy.file_roots[0], below
    absolute = os.path.normpath(path)  # only '//' and '.' are left to fold
    for root in policy.file_roots:
        if absolute.startswith(root.rstrip("/") + "/"):
            return root, PurePosixPath(absolute[len(root.rstrip("/")) + 1:]).parts
    raise _bad("is outside the directories file channels may write to (the file_roots "
               "setting); give a path relative to them", field)


def check_path(path: str, policy: DestinationPolicy, *, field: str = "config.path") -> str:
    """``path`` as it will be stored (unchanged), once :func:`place` accepts it."""
    place(path, policy, field=field)
    return path


def _open_dir(name: str, dir_fd: int) -> int:
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        return os.open(name, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        with contextlib.suppress(FileExistsError):
            os.mkdir(name, 0o700, dir_fd=dir_fd)
        return os.open(name, flags, dir_fd=dir_fd)


def open_append(root: str, below: tuple[str, ...]) -> int:
    """A descriptor appending to ``root/below...``, created (with its directories) when
    missing; :class:`OutsideRoots` when a component below the root is a symlink or the file
    is not a regular file with one link. The root itself is the operator's, made if missing."""
    os.makedirs(root, mode=0o700, exist_ok=True)
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in below[:-1]:
            try:
                nxt = _open_dir(name, fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP or (exc.errno == errno.ENOTDIR and stat.S_ISLNK(
                        os.lstat(name, dir_fd=fd).st_mode)):
                    raise OutsideRoots(errno.ELOOP, "a directory on the path is a symlink") \
                        from None
                raise
            os.close(fd)
            fd = nxt
        flags = (os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
                 | os.O_NONBLOCK | os.O_NOCTTY)
        try:
            out = os.open(below[-1], flags, 0o600, dir_fd=fd)  # tenants' data: owner-only
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise OutsideRoots(errno.ELOOP, "the file is a symlink") from None
            raise
    finally:
        os.close(fd)
    info = os.fstat(out)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1:
        os.close(out)
        raise OutsideRoots(errno.EPERM, "not a regular file with a single link")
    return out

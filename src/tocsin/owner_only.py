"""Files holding secrets or tenants' data are the owner's alone: the store's database (its
``-wal`` and ``-shm`` take its mode), the file channels' outputs, an import's rejects, the
admin key (:mod:`tocsin.apikeys.keyfile`). The ``tocsin`` command sets the umask to
:data:`UMASK` so whatever else it creates (checkpoints, archives, logs) is too."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["DIR_MODE", "FILE_MODE", "UMASK", "create_owner_only", "make_owner_only"]

FILE_MODE = 0o600
DIR_MODE = 0o700
UMASK = 0o077


def create_owner_only(path: str | Path, *, siblings: tuple[str, ...] = ()) -> None:
    """Create ``path`` empty and owner-only (and its missing directories owner-only), or take
    an existing one of this user's (and its ``path + sibling`` files: a database's ``-wal``)
    to owner-only: a store made by an earlier version was 0644."""
    target = Path(path)
    for parent in reversed(target.parents):
        if not parent.exists():
            parent.mkdir(mode=DIR_MODE, exist_ok=True)
    try:
        fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, FILE_MODE)
    except FileExistsError:
        for name in (str(target), *(str(target) + s for s in siblings)):
            try:
                info = os.stat(name)
                if info.st_uid == os.getuid() and info.st_mode & 0o077:
                    os.chmod(name, FILE_MODE)
            except OSError:
                continue
        return
    os.close(fd)


def make_owner_only(root: str | Path) -> None:
    """Take every file and directory under the local path ``root`` to owner-only (a folder
    another writer, such as Spark's, made with its own modes); nothing for a URI."""
    if "://" in str(root) and not str(root).startswith("file:"):
        return
    top = Path(str(root).removeprefix("file://").removeprefix("file:"))
    if not top.exists():
        return
    top.chmod(DIR_MODE if top.is_dir() else FILE_MODE)
    for folder, dirs, files in os.walk(top):
        for name in dirs:
            os.chmod(os.path.join(folder, name), DIR_MODE)
        for name in files:
            os.chmod(os.path.join(folder, name), FILE_MODE)

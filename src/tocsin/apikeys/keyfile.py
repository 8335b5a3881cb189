"""The local admin key: ``$TOCSIN_HOME/admin.key`` (mode 0600), written by ``tocsin up`` on
first start, so that the CLI and the Python client on the same machine need no key handling.

Which key a client sends (:func:`key_for`): ``TOCSIN_API_KEY`` when set (any API), else the
key file, but only when the API is on this machine (a loopback address), so the admin key never
leaves it by accident.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import sys
from pathlib import Path
from urllib.parse import urlsplit

from tocsin.abc import Store
from tocsin.config import Settings

__all__ = ["FILE_NAME", "ensure_admin_key", "is_loopback", "key_for", "key_path", "no_admin_hint",
           "read_key", "write_key"]

FILE_NAME = "admin.key"


def key_path(settings: Settings) -> Path:
    """Where the local admin key lives: ``home/admin.key``."""
    return settings.home / FILE_NAME


def read_key(settings: Settings) -> str | None:
    """The token in the key file, or None when there is none (or it cannot be read)."""
    try:
        token = key_path(settings).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return token or None


def is_loopback(url: str) -> bool:
    """Whether ``url`` names this machine (``localhost``, 127.0.0.0/8 or ``::1``)."""
    host = urlsplit(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def key_for(url: str, settings: Settings | None = None) -> str | None:
    """The key to send to the API at ``url``: ``settings.api_key`` (``TOCSIN_API_KEY``), else
    the local admin key when ``url`` is on loopback, else None."""
    settings = settings or Settings()
    if settings.api_key is not None:
        return settings.api_key.get_secret_value()
    return read_key(settings) if is_loopback(url) else None


def ensure_admin_key(settings: Settings, store: Store, *, now_ms: int) -> Path | None:
    """Create the local admin key unless the key file already holds a key the store knows;
    returns the file written, or None when it was kept. A key file whose key was revoked is
    kept (re-creating it would undo the revocation) and reported on stderr."""
    from tocsin.apikeys.tokens import digest_of, issue_key
    from tocsin.domain import Role

    path = key_path(settings)
    token = read_key(settings)
    if token is not None:
        known = store.key_by_digest(digest_of(token))
        if known is not None:
            with contextlib.suppress(OSError):
                path.chmod(0o600)
            if not known.active:
                print(f"tocsin: the admin key in {path} ({known.id}) is revoked; create one "
                      "with `tocsin apikeys create --local --role admin`", file=sys.stderr)
            return None
    _, token = issue_key(store, role=Role.ADMIN, name="local admin (tocsin up)", now_ms=now_ms)
    write_key(path, token)
    return path


def no_admin_hint(store: Store) -> str | None:
    """What to tell an operator starting ``tocsin api`` over a store with no active admin key
    (nobody could call it yet), or None."""
    from tocsin.domain import Role

    if any(k.active and k.role is Role.ADMIN for k in store.list_keys()):
        return None
    return ("tocsin: this store has no admin API key yet, so every /v1 request will answer "
            "401: create one with `tocsin apikeys create --local --role admin`")


def write_key(path: Path, token: str) -> None:
    """Write ``token`` to ``path`` atomically, readable only by its owner: a reader sees the
    old file or the whole new one, never a partial key or a moment of wider permissions."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # O_TRUNC on a file left by a crash keeps its old mode
        os.write(fd, f"{token}\n".encode("ascii"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)

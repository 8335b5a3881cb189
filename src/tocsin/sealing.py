"""Channel secrets encrypted at rest (``TOCSIN_ENCRYPTION_KEY``).

A :class:`Sealer` encrypts a text with AES-256-GCM (``cryptography``'s AEAD) into a versioned
envelope ``v1:<key id>:<nonce>:<ciphertext>`` (nonce and ciphertext in URL-safe base64; the
key id is the first 8 hex digits of the key's SHA-256, so an envelope names the key it needs
and never the key). The store seals a channel's secrets when it writes the channel and opens
them when it reads it (:func:`seal_config`, :func:`open_config`): the values of secret-named
settings (``secret``, ``sasl.password``, ``ssl.key.pem``, a credential header...) and a URL
that carries a password. Everything else of a configuration stays readable.

Keys are 32 random bytes in URL-safe base64 (``tocsin encryption new-key`` makes one). During
a rotation a process holds the new key as ``TOCSIN_ENCRYPTION_KEY`` and the old ones in
``TOCSIN_ENCRYPTION_OLD_KEYS``: it opens envelopes of either and seals with the new one;
``tocsin encryption rotate`` seals every stored secret again with the new key.

Without a key nothing is sealed, and an envelope read is :class:`EncryptionKeyError`, one line
naming the key id it needs. No message, log line or error ever holds a key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import re
from collections.abc import Iterable
from typing import Any

from tocsin.errors import TocsinError
from tocsin.redact import is_secret_name

__all__ = ["ENVELOPE", "EncryptionKeyError", "Sealer", "has_sealed", "new_key", "open_config",
           "seal_config"]

ENVELOPE = re.compile(r"v1:([0-9a-f]{8}):([A-Za-z0-9_-]{16}):([A-Za-z0-9_=-]+)")
"""A sealed value: version, key id, 96-bit nonce, ciphertext with its tag."""
_AAD = b"tocsin-channel-secret-v1"


class EncryptionKeyError(TocsinError):
    """A sealed value this process has no key for, or a key that is not a key."""


def new_key() -> str:
    """A fresh key: 32 random bytes, URL-safe base64."""
    return base64.urlsafe_b64encode(os.urandom(32)).decode()


def _key_bytes(text: str, name: str) -> bytes:
    try:
        raw = base64.urlsafe_b64decode(text.strip().encode() + b"=" * (-len(text.strip()) % 4))
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != 32:
        raise EncryptionKeyError(f"{name} is not a key: 32 bytes in URL-safe base64 "
                                 "(tocsin encryption new-key makes one)")
    return raw


def key_id(raw: bytes) -> str:
    """The public id of a key: the first 8 hex digits of its SHA-256."""
    return hashlib.sha256(raw).hexdigest()[:8]


def _aead(raw: bytes) -> Any:
    """AES-256-GCM with ``raw`` (``cryptography`` is loaded only when a key is set)."""
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise EncryptionKeyError("an encryption key is set but the cryptography package is "
                                 "missing: pip install cryptography") from exc
    return AESGCM(raw)


class Sealer:
    """Seals with ``current`` (None: seals nothing) and opens envelopes of any key it holds."""

    def __init__(self, current: str | None = None, old: Iterable[str] = ()) -> None:
        self._keys: dict[str, Any] = {}
        self.current: str | None = None
        for n, text in enumerate(old):
            raw = _key_bytes(text, f"old key {n + 1}")
            self._keys[key_id(raw)] = _aead(raw)
        if current:
            raw = _key_bytes(current, "TOCSIN_ENCRYPTION_KEY")
            self.current = key_id(raw)
            self._keys[self.current] = _aead(raw)

    def __repr__(self) -> str:
        return f"Sealer(current={self.current!r}, keys={sorted(self._keys)!r})"

    @classmethod
    def from_settings(cls) -> Sealer:
        """The sealer of this process's settings (``encryption_key``, ``encryption_old_keys``)."""
        from tocsin.config import Settings

        settings = Settings()
        current = settings.encryption_key.get_secret_value() if settings.encryption_key else None
        return cls(current, [k for k in settings.encryption_old_keys if k.strip()])

    def seal(self, text: str) -> str:
        """``text`` sealed with the current key (unchanged without one, or already sealed)."""
        if self.current is None or ENVELOPE.fullmatch(text):
            return text
        nonce = os.urandom(12)
        sealed = self._keys[self.current].encrypt(nonce, text.encode(), _AAD)
        return (f"v1:{self.current}:{base64.urlsafe_b64encode(nonce).decode()}:"
                f"{base64.urlsafe_b64encode(sealed).decode()}")

    def open(self, value: str) -> str:
        """The text of a sealed ``value`` (any other text as it is)."""
        found = ENVELOPE.fullmatch(value)
        if found is None:
            return value
        kid, nonce, sealed = found.groups()
        aead = self._keys.get(kid)
        if aead is None:
            raise EncryptionKeyError(
                f"the store holds channel secrets sealed with encryption key {kid}, which this "
                "process does not have: set TOCSIN_ENCRYPTION_KEY (or, while rotating, "
                "TOCSIN_ENCRYPTION_OLD_KEYS)")
        from cryptography.exceptions import InvalidTag

        try:
            return str(aead.decrypt(base64.urlsafe_b64decode(nonce),
                                    base64.urlsafe_b64decode(sealed), _AAD).decode())
        except (InvalidTag, binascii.Error, ValueError):  # a key's text never in the message
            raise EncryptionKeyError(f"a channel secret sealed with key {kid} does not open: "
                                     "it was changed or damaged") from None


def _secret_url(name: str, value: str) -> bool:
    from urllib.parse import urlsplit

    if name not in ("url", "endpoint_url", "queue_url") or "://" not in value:
        return False
    try:
        return bool(urlsplit(value).password)
    except ValueError:
        return False


def _walk(value: Any, name: str, leaf: Any) -> Any:
    if isinstance(value, dict):
        return {k: _walk(v, str(k), leaf) for k, v in value.items()}
    if isinstance(value, list):
        return [_walk(v, name, leaf) for v in value]
    if isinstance(value, str):
        return leaf(name, value)
    return value


def seal_config(config: dict[str, Any], sealer: Sealer) -> dict[str, Any]:
    """``config`` with its secrets sealed (see the module)."""
    if sealer.current is None:
        return config

    def leaf(name: str, value: str) -> str:
        if value and (is_secret_name(name) or _secret_url(name, value)):
            return sealer.seal(value)
        return value

    sealed: dict[str, Any] = _walk(config, "", leaf)
    return sealed


def open_config(config: dict[str, Any], sealer: Sealer) -> dict[str, Any]:
    """``config`` with every sealed value opened."""
    opened: dict[str, Any] = _walk(config, "", lambda _, value: sealer.open(value))
    return opened


def has_sealed(text: str) -> bool:
    """Whether a stored configuration's JSON text holds a sealed value."""
    return ENVELOPE.search(text) is not None

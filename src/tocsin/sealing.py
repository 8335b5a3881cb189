"""Channel secrets, and optionally payloads, encrypted at rest (``TOCSIN_ENCRYPTION_KEY``).

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

Payloads (of schedules and recurring rules) are sealed too when ``TOCSIN_ENCRYPT_PAYLOADS`` is
on: a binary envelope :data:`PAYLOAD_MAGIC` ``<key id>:<nonce><ciphertext>`` (AAD
``tocsin-payload-v1``), written by the store's row builders (:func:`seal_payload`) and opened
by its row readers (:func:`open_payload`), so delivery, ``GET`` and the dead letters see the
payload as sent. A payload sealed once stays readable with the flag off while the key is held;
``tocsin encryption rotate`` seals them again with the new key (and seals those in clear when
the flag is on). The process's payload keys are read once from its settings
(:func:`payload_keys`; :func:`use_payload_keys` sets others).

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

__all__ = ["ENVELOPE", "PAYLOAD_MAGIC", "EncryptionKeyError", "PayloadKeys", "Sealer",
           "has_sealed", "new_key", "open_config", "open_payload", "payload_keys",
           "seal_config", "seal_payload", "use_payload_keys"]

ENVELOPE = re.compile(r"v1:([0-9a-f]{8}):([A-Za-z0-9_-]{16}):([A-Za-z0-9_=-]+)")
"""A sealed value: version, key id, 96-bit nonce, ciphertext with its tag."""
_AAD = b"tocsin-channel-secret-v1"
PAYLOAD_MAGIC = b"\x00tocsin-sealed-v1:"
"""How a sealed payload begins: a NUL byte no JSON or text payload starts with, then a mark;
then the key id (8 ASCII hex digits), ``:``, a 96-bit nonce and the ciphertext with its tag."""
_PAYLOAD_AAD = b"tocsin-payload-v1"
_KID_AT = len(PAYLOAD_MAGIC)
_NONCE_AT = _KID_AT + 9
_DATA_AT = _NONCE_AT + 12


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


    def seal_bytes(self, data: bytes) -> bytes:
        """``data`` sealed with the current key in a payload envelope (:data:`PAYLOAD_MAGIC`);
        :class:`EncryptionKeyError` without a current key."""
        if self.current is None:
            raise EncryptionKeyError("payloads are to be sealed but TOCSIN_ENCRYPTION_KEY is "
                                     "not set")
        nonce = os.urandom(12)
        sealed = bytes(self._keys[self.current].encrypt(nonce, data, _PAYLOAD_AAD))
        return PAYLOAD_MAGIC + self.current.encode() + b":" + nonce + sealed

    def open_bytes(self, data: bytes) -> bytes:
        """The payload a payload envelope holds (any other bytes as they are)."""
        if not data.startswith(PAYLOAD_MAGIC):
            return data
        kid = data[_KID_AT:_KID_AT + 8].decode("ascii", "replace")
        aead = self._keys.get(kid)
        if aead is None:
            raise EncryptionKeyError(
                f"the store holds payloads sealed with encryption key {kid}, which this "
                "process does not have: set TOCSIN_ENCRYPTION_KEY (or, while rotating, "
                "TOCSIN_ENCRYPTION_OLD_KEYS)")
        from cryptography.exceptions import InvalidTag

        try:
            return bytes(aead.decrypt(data[_NONCE_AT:_DATA_AT], data[_DATA_AT:], _PAYLOAD_AAD))
        except (InvalidTag, ValueError):
            raise EncryptionKeyError(f"a payload sealed with key {kid} does not open: it was "
                                     "changed or damaged") from None

    def sealed_with_current(self, data: bytes) -> bool:
        """Whether ``data`` is a payload envelope of the current key."""
        return self.current is not None and data.startswith(
            PAYLOAD_MAGIC + self.current.encode() + b":")


class PayloadKeys:
    """A process's keys for payloads: ``sealer`` opens every envelope it has a key for, and
    seals new payloads when ``seal`` is on."""

    __slots__ = ("seal", "sealer")

    def __init__(self, sealer: Sealer, *, seal: bool) -> None:
        if seal and sealer.current is None:
            raise EncryptionKeyError("TOCSIN_ENCRYPT_PAYLOADS is on but TOCSIN_ENCRYPTION_KEY "
                                     "is not set")
        self.sealer, self.seal = sealer, seal


_payload_keys: PayloadKeys | None = None


def payload_keys() -> PayloadKeys:
    """This process's payload keys, read from its settings on first use."""
    global _payload_keys
    if _payload_keys is None:
        from tocsin.config import Settings

        _payload_keys = PayloadKeys(Sealer.from_settings(),
                                    seal=Settings().encrypt_payloads)
    return _payload_keys


def use_payload_keys(keys: PayloadKeys | None) -> None:
    """Seal and open payloads with ``keys`` from now on (None: the settings' again)."""
    global _payload_keys
    _payload_keys = keys


def seal_payload(data: bytes) -> bytes:
    """``data`` as the store writes it: sealed when payloads are sealed, else as it is."""
    keys = payload_keys()
    return keys.sealer.seal_bytes(data) if keys.seal else data


def open_payload(data: bytes) -> bytes:
    """A stored payload as it was sent (opened when sealed)."""
    if not data.startswith(PAYLOAD_MAGIC):
        return data
    return payload_keys().sealer.open_bytes(data)


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

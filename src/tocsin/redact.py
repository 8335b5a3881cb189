"""Secrets are write-only: :func:`redact` is the one function that hides them, used wherever
a configuration leaves the process (API answers, CLI output, ``tocsin config``, the startup
line, log lines).

What counts as a secret: the value of any key whose name says so (``secret``, ``secrets``,
``password``, ``sasl.password``, ``ssl.key.password``, ``token``, ``api_key``, ``*.pem`` key
material...), any header named like a credential (``Authorization``, ``Proxy-Authorization``,
``Cookie``, ``X-API-Key``...), the password of a URL (``amqp://user:***@host``,
``postgresql://user:***@host/db``) and URL query parameters named like one. Each is shown as
:data:`MASK`; a missing or empty value stays as it is, so a reader can tell "not set".
"""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

__all__ = ["MASK", "is_secret_name", "masked", "redact", "redact_url"]

MASK = "***"
"""What a secret reads as."""

_SECRET_NAME = re.compile(
    r"(secret|passw|token|credential|api[-_.]?key|private[-_.]?key|key\.pem|signature|"
    r"encryption[-_.]?(old[-_.]?)?keys?|"
    r"^authorization$|^proxy-authorization$|^cookie$|^set-cookie$|^x-auth)",
    re.IGNORECASE,
)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")
SECRET_QUERY = frozenset({"code", "sig", "key", "token", "apikey", "access_token", "auth",
                          "signature", "secret", "password", "pwd"})
"""Query parameters that carry a credential whatever their name says: Azure Functions'
``code``, Azure Logic Apps' ``sig``, Google Chat's ``key`` and ``token``..."""
SECRET_PATHS = (re.compile(r"(^|\.)hooks\.slack\.com$"),
                re.compile(r"(^|\.)(discord|discordapp)\.com$"),
                re.compile(r"(^|\.)webhook\.office\.com$"),
                re.compile(r"(^|\.)logic\.azure\.com$"),
                re.compile(r"(^|\.)chat\.googleapis\.com$"),
                re.compile(r"(^|\.)(api\.)?telegram\.org$"))
"""Hosts whose webhook URLs carry the secret in the path (Slack's
``/services/T…/B…/<secret>``, Discord's ``/api/webhooks/<id>/<token>``): shown as the origin
and a masked path."""


def is_secret_name(name: str) -> bool:
    """Whether a setting or header called ``name`` holds a secret."""
    return bool(_SECRET_NAME.search(name))


def _secret_query(name: str) -> bool:
    return is_secret_name(name) or name.lower() in SECRET_QUERY


def redact_url(url: str) -> str:
    """``url`` with its password and secret-looking query values replaced by :data:`MASK`;
    text that is not a URL is returned unchanged."""
    if not _URL.match(url):
        return url
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url
    out = url
    if password:
        userinfo, _, hostport = parts.netloc.rpartition("@")
        out = out.replace(parts.netloc, f"{userinfo.split(':', 1)[0]}:{MASK}@{hostport}", 1)
    host = (parts.hostname or "").rstrip(".")
    if parts.path.strip("/") and any(p.search(host) for p in SECRET_PATHS):
        netloc = out.split("://", 1)[1].split("/", 1)[0].split("?", 1)[0]
        return f"{parts.scheme}://{netloc}/{MASK}"  # the path is the secret: origin alone
    if parts.query:
        pairs = parse_qsl(parts.query, keep_blank_values=True)
        if any(_secret_query(k) and v for k, v in pairs):
            query = urlencode([(k, MASK if _secret_query(k) and v else v) for k, v in pairs],
                              safe="*")
            out = out.replace("?" + parts.query, "?" + query, 1)
    return out


def redact(value: Any, *, name: str = "") -> Any:
    """A copy of ``value`` (a mapping, list, string or scalar, nested at will) with every
    secret replaced by :data:`MASK`. ``name`` is the key ``value`` is held under, if any."""
    if isinstance(value, dict):
        return {k: redact(v, name=str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(v, name=name) for v in value]
    if name and is_secret_name(name) and value not in (None, "", [], {}):
        return MASK
    if isinstance(value, str):
        setting, sep, secret = value.partition("=")
        if sep and secret and not _URL.match(value) and is_secret_name(setting):
            return f"{setting}={MASK}"  # NAME=VALUE settings (TOCSIN_INGEST_KAFKA)
        return redact_url(value)
    return value


def masked(value: Any, path: str = "") -> str | None:
    """The dotted path of the first place in ``value`` where :func:`redact`'s output was sent
    back instead of a secret (a :data:`MASK` where a secret goes, or as a URL's password), or
    None: a caller that read a configuration and registers it again must send the secrets."""
    if isinstance(value, dict):
        for k, v in value.items():
            if (found := masked(v, f"{path}.{k}" if path else str(k))) is not None:
                return found
        return None
    if isinstance(value, list | tuple):
        return next((p for v in value if (p := masked(v, path)) is not None), None)
    if isinstance(value, str) and (value == MASK or f":{MASK}@" in value
                                   or value.endswith(f"/{MASK}") or f"={MASK}" in value):
        return path
    return None

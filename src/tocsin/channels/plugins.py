"""Plug-in channels: kinds that other packages add through the ``tocsin.channels`` entry-point
group (docs/operations.md, "Writing a channel").

A package declares, in its ``pyproject.toml``::

    [project.entry-points."tocsin.channels"]
    acme_queue = "acme_tocsin.channel:AcmeQueueChannel"

The entry point's name is the kind (lower-case letters, digits and ``_``, not a built-in
kind's name); its object is a :class:`~tocsin.abc.Channel` subclass with a ``config_class``
attribute: a frozen dataclass of the kind's settings, checked by
:func:`~tocsin.channels.config.parse_config` like a built-in kind's (unknown names and wrong
types refused, naming the field), with an optional ``check()`` and ``admit(policy)`` (the
destination policy hook: call :func:`~tocsin.channels.addresses.check_broker` or
:func:`~tocsin.channels.addresses.check_host` there). The class is built as
``cls(spec, policy=..., limits=...)``: a plug-in caps its own timeouts with
``limits.timeout(...)``.

From there a plug-in's channels take the same path as the built-in ones: registration through
the API checks its config and the policy, secrets in its config are redacted wherever a
configuration is shown (by name: ``password``, ``token``, ``secret``...), the dispatcher's lanes
send to it with the same deadline, breaker and retry rules, and ``tocsin channels test`` tries
it. Entry points are read once per process, when a kind that is not built in is first named.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

from tocsin.abc import Channel
from tocsin.domain import ChannelKind

__all__ = ["GROUP", "Plugin", "plugin", "plugins"]

GROUP = "tocsin.channels"
"""The entry-point group a package registers its channel kinds in."""

_lock = threading.Lock()
_found: dict[str, EntryPoint] | None = None


@dataclass(frozen=True, slots=True)
class Plugin:
    """A plug-in kind, loaded: its channel class and its config class."""

    kind: ChannelKind
    channel_class: type[Channel]
    config_class: type
    source: str
    """The entry point's value (``module:Class``), for messages."""


def plugins() -> dict[str, EntryPoint]:
    """The entry points of the ``tocsin.channels`` group installed here, by kind (a built-in
    kind's name is never taken from a plug-in)."""
    global _found
    with _lock:
        if _found is None:
            builtin = {k.value for k in ChannelKind.__members__.values()}
            _found = {ep.name: ep for ep in entry_points(group=GROUP)
                      if ep.name not in builtin}
        return dict(_found)


def forget() -> None:
    """Read the entry points again at the next use (after installing a package in-process)."""
    global _found
    with _lock:
        _found = None


def plugin(kind: ChannelKind) -> Plugin | None:
    """``kind``'s plug-in, loaded, or None when no installed package provides it; ImportError
    naming the entry point when its object cannot be loaded or is not a channel class."""
    found = plugins().get(kind.value)
    if found is None:
        return None
    try:
        cls = found.load()
    except Exception as exc:
        raise ImportError(f"channel kind {kind.value!r}: cannot load {found.value}: "
                          f"{type(exc).__name__}: {exc}") from exc
    config = getattr(cls, "config_class", None)
    if not (isinstance(cls, type) and issubclass(cls, Channel)) or not isinstance(config, type):
        raise ImportError(f"channel kind {kind.value!r}: {found.value} is not a Channel "
                          "subclass with a config_class")
    return Plugin(kind, cls, config, found.value)

"""Name lookups for the destination policy, with a deadline, failing closed.

:func:`resolve` answers the addresses a host name resolves to, or raises
:class:`UnresolvedName`: when the name does not resolve, when the lookup takes longer than
its deadline, and when :data:`MAX_LOOKUPS` lookups are already under way. There is no answer
that lets a name pass unchecked.

Each lookup runs in a thread of its own (``getaddrinfo`` cannot be cancelled), which holds one
of :data:`MAX_LOOKUPS` slots until the system's resolver gives up. A lookup that hangs past its
deadline is refused at once and keeps its slot only until it returns; when hanging lookups
hold every slot, later lookups are refused too (never waved through), and the slots come back
as the hanging ones end.
"""

from __future__ import annotations

import ipaddress
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["MAX_LOOKUPS", "RESOLVE_TIMEOUT_S", "IPAddress", "UnresolvedName", "resolve"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_TIMEOUT_S = 2.0
"""How long a check waits for a name; a name that does not resolve in time is refused."""
MAX_LOOKUPS = 16
"""Lookups under way at once in a process; one more is refused until a slot comes back."""
_slots = threading.BoundedSemaphore(MAX_LOOKUPS)

Lookup = Callable[..., list[Any]]


class UnresolvedName(OSError):
    """A name the policy cannot judge (it does not resolve, or not in time): refused."""


def resolve(host: str, *, deadline_s: float = RESOLVE_TIMEOUT_S,
            lookup: Lookup = socket.getaddrinfo) -> list[IPAddress]:
    """The addresses ``host`` resolves to (``lookup`` is ``getaddrinfo``'s signature; tests
    hand in one that hangs); :class:`UnresolvedName` when there are none in ``deadline_s``."""
    if not _slots.acquire(blocking=False):
        raise UnresolvedName(f"{host} was not looked up: {MAX_LOOKUPS} lookups are already "
                             "under way")
    done = threading.Event()
    found: list[IPAddress] = []
    failure: list[str] = []

    def run() -> None:
        try:
            infos = lookup(host, None, proto=socket.IPPROTO_TCP)
            found.extend(ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])
                         for info in infos)
        except (OSError, UnicodeError, ValueError) as exc:
            failure.append(type(exc).__name__)
        finally:
            _slots.release()
            done.set()

    threading.Thread(target=run, name="tocsin-resolve", daemon=True).start()
    if not done.wait(deadline_s):
        raise UnresolvedName(f"{host} did not resolve within {deadline_s:g} s")
    if failure or not found:
        raise UnresolvedName(f"{host} does not resolve")
    return found

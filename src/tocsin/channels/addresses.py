"""Which network addresses a webhook may reach.

An address is refused when it is not public: loopback, private, shared (100.64/10),
link-local (169.254.169.254, the cloud metadata service), multicast, reserved, unspecified,
or an IPv6 form that wraps one of these (``::ffff:127.0.0.1``, 6to4, Teredo) — unless the
policy's ``webhook_allow`` names its network, or names the URL's host. Hosts written as one
integer, in octal or in hex (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) are read as the
address the C resolver would make of them, and judged as that address.

:func:`check_host` is the registration check; the webhook channel checks again every address
a name resolves to just before it connects, and connects to the address it checked
(DNS rebinding gets no second answer).
"""

from __future__ import annotations

import ipaddress
import socket
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout

from tocsin.channels.policy import DestinationPolicy
from tocsin.errors import ValidationError

__all__ = ["IPAddress", "RefusedAddress", "check_address", "check_host", "classify",
           "literal_address"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
RESOLVE_TIMEOUT_S = 2.0
"""How long registration waits for DNS; a name that does not resolve in time is checked only
at connect time."""
_resolver = ThreadPoolExecutor(max_workers=2, thread_name_prefix="tocsin-resolve")


class RefusedAddress(OSError):
    """The destination resolved to an address the policy refuses."""


def classify(address: IPAddress) -> str | None:
    """Why ``address`` is not public (``"loopback"``, ``"private"``...), or None if it is."""
    if isinstance(address, ipaddress.IPv6Address):
        inner = address.ipv4_mapped or address.sixtofour or (
            address.teredo[1] if address.teredo else None)
        if inner is not None:
            return classify(inner)
    for kind in ("unspecified", "loopback", "link_local", "multicast", "reserved"):
        if getattr(address, f"is_{kind}"):
            return kind.replace("_", "-")
    if address.is_private:
        return "private"
    if not address.is_global:
        return "non-public"
    return None


def literal_address(host: str) -> IPAddress | None:
    """The address ``host`` denotes when it is an IP literal in any form the C resolver
    accepts (dotted quad, one integer, octal, hex, IPv6 in brackets or not), else None."""
    host = host.strip("[]")
    try:
        return ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        pass
    try:
        return ipaddress.IPv4Address(socket.inet_aton(host))
    except OSError:
        return None


def check_address(address: IPAddress, host: str, policy: DestinationPolicy) -> None:
    """:class:`RefusedAddress` unless ``policy`` lets a webhook to ``host`` reach
    ``address``."""
    why = classify(address)
    if why and not policy.allows_address(address) and not policy.allows_host(host):
        raise RefusedAddress(f"{host} is or resolves to a {why} address, which webhooks may "
                             "not reach unless the webhook_allow setting names it")


def check_host(host: str, policy: DestinationPolicy, *, field: str = "config.url") -> None:
    """The registration check of a URL's host; ValidationError naming ``field``."""
    if policy.allows_host(host):
        return
    literal = literal_address(host)
    addresses: list[IPAddress] = []
    if literal is not None:
        addresses = [literal]
    else:
        future = _resolver.submit(socket.getaddrinfo, host, None, proto=socket.IPPROTO_TCP)
        try:
            infos = future.result(timeout=RESOLVE_TIMEOUT_S)
        except (OSError, FutureTimeout, UnicodeError):
            return  # not resolvable now: checked when connecting
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        try:
            check_address(address, host, policy)
        except RefusedAddress as exc:
            raise ValidationError(field, str(exc)) from None

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

__all__ = ["IPAddress", "RefusedAddress", "broker_hosts", "check_address", "check_broker",
           "check_host", "classify", "client_host", "literal_address"]

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
        what = "webhooks" if policy.allow_setting == "webhook_allow" else "brokers"
        raise RefusedAddress(f"{host} is or resolves to a {why} address, which {what} may "
                             f"not reach unless the {policy.allow_setting} setting names it")


def client_host(url: str) -> str:
    """The host an HTTP client connects to for ``url``, normalised as aiohttp does (yarl:
    IDNA, so full-width digits and ideographic dots (U+FF11, U+3002) read as ``127.0.0.1``);
    ``""`` when the URL has none or cannot be read. Both checks judge this host, never the raw
    text, so what is checked is what is reached."""
    from yarl import URL

    try:
        return URL(url).raw_host or ""
    except (ValueError, UnicodeError, TypeError):
        return ""


def broker_hosts(servers: str) -> list[str]:
    """The hosts of a broker list (``host:port,[::1]:9092,host``), IDNA-normalised like a
    resolver reads them; ValueError when an entry has none."""
    hosts = []
    for entry in servers.split(","):
        entry = entry.strip()
        if entry.startswith("["):
            host = entry[1:entry.find("]")] if "]" in entry else ""
        elif entry.count(":") > 1:  # a bare IPv6 address
            host = entry
        else:
            host = entry.rsplit(":", 1)[0] if ":" in entry else entry
        if not host:
            raise ValueError(f"{entry!r} names no host")
        hosts.append(client_host(f"http://[{host}]/") if ":" in host else
                     client_host(f"http://{host}/") or host)
    return hosts


def check_broker(servers: str, policy: DestinationPolicy, *, field: str) -> None:
    """The check of a Kafka broker list or an AMQP URL's host against the policy's brokers
    (:meth:`~tocsin.channels.policy.DestinationPolicy.for_brokers`); ValidationError naming
    ``field``. Checked when a channel is registered and again when a dispatcher builds it;
    the broker clients resolve names themselves, so a name that does not resolve now passes
    (it cannot be reached either) and a DNS answer that changes after the dispatcher's check is
    not seen (docs/security.md)."""
    brokers = policy.for_brokers()
    try:
        hosts = broker_hosts(servers)
    except ValueError as exc:
        raise ValidationError(field, str(exc)) from None
    for host in hosts:
        check_host(host, brokers, field=field)


def check_host(host: str, policy: DestinationPolicy, *, field: str = "config.url",
               unresolved_ok: bool = True) -> None:
    """The registration check of a URL's host; ValidationError naming ``field``. A name that
    does not resolve in time passes when ``unresolved_ok`` (the webhook checks it again when
    it connects)."""
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
            if unresolved_ok:
                return  # not resolvable now: checked when connecting
            raise ValidationError(field, f"{host} does not resolve") from None
        addresses = [ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]) for info in infos]
    for address in addresses:
        try:
            check_address(address, host, policy)
        except RefusedAddress as exc:
            raise ValidationError(field, str(exc)) from None

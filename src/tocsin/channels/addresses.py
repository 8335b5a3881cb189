"""Which network addresses a webhook may reach.

An address is refused when it is not public: loopback, private, shared (100.64/10),
link-local (169.254.169.254, the cloud metadata service), multicast, reserved, unspecified,
or an IPv6 form that wraps one of these (``::ffff:127.0.0.1``, 6to4, Teredo) — unless the
policy's ``webhook_allow`` names its network, or names the URL's host. Hosts written as one
integer, in octal or in hex (``2130706433``, ``0177.0.0.1``, ``0x7f.1``) are read as the
address the C resolver would make of them, and judged as that address.

:func:`check_host` is the registration check; the webhook channel checks again every address
a name resolves to just before it connects, and connects to the address it checked
(DNS rebinding gets no second answer). A name that does not resolve, or not within its
deadline, is refused (:mod:`tocsin.channels.resolver`): there is no path on which a name
passes unchecked.

Brokers are judged by the hosts their client library will connect to, read exactly as it
reads them: a Kafka ``bootstrap.servers`` list as librdkafka does (:func:`kafka_hosts`:
``PLAINTEXT://``, ``SSL://``, ``SASL_PLAINTEXT://`` and ``SASL_SSL://`` prefixes, IPv6 in
brackets, comma lists; anything librdkafka would read otherwise than plainly is refused), an
AMQP URL as pika does (:func:`amqp_host`: ``urllib``'s ``hostname``, ``localhost`` when the
URL names none, so ``amqp://u:p<backslash>@10.1.2.3/`` is judged as ``10.1.2.3``).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from urllib.parse import urlsplit

from tocsin.channels.policy import DestinationPolicy
from tocsin.channels.resolver import IPAddress, UnresolvedName, resolve
from tocsin.errors import ValidationError

__all__ = ["KAFKA_PROTOCOLS", "IPAddress", "RefusedAddress", "amqp_host", "broker_hosts",
           "check_address", "check_amqp_broker", "check_broker", "check_host", "classify",
           "client_host", "kafka_hosts", "literal_address"]

KAFKA_PROTOCOLS = frozenset({"plaintext", "ssl", "sasl_plaintext", "sasl_ssl"})
"""The ``<protocol>://`` prefixes librdkafka takes on a broker (case does not matter)."""
_HOST_NAME = re.compile(r"[A-Za-z0-9._-]+")
"""A broker host librdkafka hands to the resolver as it is (anything else is refused)."""


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


def kafka_hosts(servers: str) -> list[str]:
    """The hosts librdkafka connects to for a ``bootstrap.servers`` list; ValueError for an
    entry it would read otherwise than as ``[<protocol>://]host[:port]``,
    ``[<protocol>://][ipv6][:port]`` or ``[<protocol>://]ipv6``.

    As librdkafka: entries split at commas, leading spaces skipped, empty entries skipped; a
    ``<protocol>://`` prefix is one of :data:`KAFKA_PROTOCOLS`; an entry with two colons or
    more and no brackets is an IPv6 address without a port; the default port is 9092. Stricter
    than librdkafka (refused where it would guess): an entry with nothing after its prefix
    (librdkafka reads ``localhost``), a port that is not 1-65535, a host with characters no
    host name has."""
    hosts = []
    for raw in servers.split(","):
        entry = raw.strip(" ")
        if not entry:
            continue
        if "://" in entry:
            protocol, _, entry = entry.partition("://")
            if protocol.lower() not in KAFKA_PROTOCOLS:
                raise ValueError(f"{raw.strip()!r}: {protocol!r} is not a protocol librdkafka "
                                 f"takes ({', '.join(sorted(KAFKA_PROTOCOLS))})")
        hosts.append(_kafka_host(entry, raw.strip()))
    if not hosts:
        raise ValueError("names no broker")
    return hosts


def _kafka_host(entry: str, raw: str) -> str:
    if entry.startswith("["):
        inside, closed, port = entry[1:].partition("]")
        if not closed or (port and not _port(port.removeprefix(":"))) or (
                port and not port.startswith(":")):
            raise ValueError(f"{raw!r} is not [IPv6 address]:port")
        if not _ipv6(inside):
            raise ValueError(f"{raw!r}: {inside!r} is not an IPv6 address")
        return inside.lower()
    if entry.count(":") > 1:  # librdkafka: an IPv6 address, no port
        if not _ipv6(entry):
            raise ValueError(f"{raw!r} is not host:port (nor an IPv6 address)")
        return entry.lower()
    host, colon, port = entry.partition(":")
    if not host or (colon and not _port(port)):
        raise ValueError(f"{raw!r} is not host:port")
    if not _HOST_NAME.fullmatch(host):
        raise ValueError(f"{raw!r}: {host!r} is not a host name")
    return host.lower()


def _port(text: str) -> bool:
    return text.isascii() and text.isdigit() and 0 < int(text) < 65536


def _ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def broker_hosts(servers: str) -> list[str]:
    """The hosts of a broker list (:func:`kafka_hosts`)."""
    return kafka_hosts(servers)


def amqp_host(url: str) -> str:
    """The host pika connects to for ``url`` (``pika.URLParameters``: it swaps the scheme for
    http(s) and reads ``urllib``'s ``hostname``, ``localhost`` when there is none);
    ValueError when pika would refuse the URL."""
    parts = urlsplit(url.replace("amqp", "http", 1))
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"the scheme must be amqp or amqps, not {parts.scheme!r}")
    parts.port  # noqa: B018 - raises ValueError on a port pika refuses too
    return parts.hostname or "localhost"


def check_broker(servers: str, policy: DestinationPolicy, *, field: str) -> None:
    """The check of a Kafka broker list (or one broker host) against the policy's brokers
    (:meth:`~tocsin.channels.policy.DestinationPolicy.for_brokers`); ValidationError naming
    ``field``. Checked when a channel is registered and again when a dispatcher builds it; a
    name that does not resolve, or not in time, is refused. The broker clients resolve names
    themselves, so a DNS answer that changes after the dispatcher's check is not seen
    (docs/security.md)."""
    brokers = policy.for_brokers()
    try:
        hosts = kafka_hosts(servers)
    except ValueError as exc:
        raise ValidationError(field, str(exc)) from None
    for host in hosts:
        check_host(host, brokers, field=field)


def check_amqp_broker(url: str, policy: DestinationPolicy, *, field: str = "config.url") -> None:
    """:func:`check_broker` for the host pika connects to for the AMQP ``url``."""
    try:
        host = amqp_host(url)
    except ValueError as exc:
        raise ValidationError(field, str(exc)) from None
    check_host(host, policy.for_brokers(), field=field)


def check_host(host: str, policy: DestinationPolicy, *, field: str = "config.url") -> None:
    """The check of a destination's host; ValidationError naming ``field``, also when the
    name does not resolve or not in time (:func:`~tocsin.channels.resolver.resolve`)."""
    if policy.allows_host(host):
        return
    literal = literal_address(host)
    if literal is not None:
        addresses = [literal]
    else:
        try:
            addresses = resolve(host)
        except UnresolvedName as exc:
            raise ValidationError(field, f"{exc}: a destination that cannot be checked is "
                                         f"refused (unless the {policy.allow_setting} "
                                         "setting names its host)") from None
    for address in addresses:
        try:
            check_address(address, host, policy)
        except RefusedAddress as exc:
            raise ValidationError(field, str(exc)) from None

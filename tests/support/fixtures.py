"""Session-wide real servers: one webhook receiver, one Kafka-protocol broker and one RabbitMQ
node per run, each started on first use.

``receiver``      the run's :class:`Receiver`, reset (records cleared, answering 200) per test
``receiver_server`` the same receiver, not reset
``kafka``         the run's :class:`Tansu` broker (``.bootstrap``, ``.create_topic``)
``kafka_broker``  its bootstrap string, ``127.0.0.1:<port>``
``kafka_tls``     a second :class:`TlsTansu` broker, reached over TLS only (``.bootstrap``,
                  ``.client``: the settings that trust its CA, ``.proxy``: handshakes counted)
``rabbitmq``      the run's :class:`RabbitMQ` node (``.url``); skipped when rabbitmq-server is
                  not installed, failed instead under ``CI``
``sqs_server``    the run's moto SQS-protocol server (``.endpoint``, ``.create_queue``)
``redis_server``  the run's redis-server (``.url``)
``nats_server``   the run's nats-server with JetStream (``.url``)
                  (each skipped when not installed, failed instead under ``CI``)
``lines_server``  the example plug-in's server (``tests/plugins/tocsin_example_channel``,
                  installed by ``scripts/bootstrap.sh --dev``), ``.address``
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.support.rabbitmq import RabbitMQ
from tests.support.servers import MotoSQS, NatsServer, RedisServer, Server
from tocsin.testing.receiver import Receiver
from tocsin.testing.tansu import Tansu, TlsTansu


@pytest.fixture(scope="session")
def receiver_server() -> Iterator[Receiver]:
    """The run's webhook receiver."""
    server = Receiver().start()
    yield server
    server.stop()


@pytest.fixture
def receiver(receiver_server: Receiver) -> Receiver:
    """The webhook receiver, reset to answer 200 to everything."""
    receiver_server.reset()
    return receiver_server


@pytest.fixture(scope="session")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tansu]:
    """The run's Kafka-protocol broker."""
    broker = Tansu(tmp_path_factory.mktemp("tansu") / "tansu.log").start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_broker(kafka: Tansu) -> str:
    """The bootstrap servers of the run's Kafka-protocol broker."""
    return kafka.bootstrap


@pytest.fixture(scope="session")
def kafka_tls(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TlsTansu]:
    """The run's Kafka-protocol broker behind a TLS proxy (tansu speaks no TLS itself)."""
    broker = TlsTansu(tmp_path_factory.mktemp("tansu-tls")).start()
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def rabbitmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitMQ]:
    """The run's RabbitMQ node (Debian's rabbitmq-server; ``./test.sh`` installs it)."""
    if not RabbitMQ.available():
        if os.environ.get("CI"):
            pytest.fail("rabbitmq-server is not installed (scripts/bootstrap.sh --dev installs it)")
        pytest.skip("rabbitmq-server is not installed: run ./test.sh, which installs it")
    node = RabbitMQ(tmp_path_factory.mktemp("rabbitmq")).start()
    yield node
    node.stop()


S = TypeVar("S", bound=Server)


def _server(cls: type[S], tmp_path_factory: pytest.TempPathFactory) -> Iterator[S]:
    if not cls.available():
        what = f"{cls.__name__} ({cls.program})"
        if os.environ.get("CI"):
            pytest.fail(f"{what} is not installed (scripts/bootstrap.sh --dev installs it)")
        pytest.skip(f"{what} is not installed: run scripts/bootstrap.sh --dev")
    server = cls(tmp_path_factory.mktemp(cls.__name__.lower()))
    server.start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def sqs_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MotoSQS]:
    """The run's SQS-protocol server (moto)."""
    yield from _server(MotoSQS, tmp_path_factory)


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """The run's redis-server."""
    yield from _server(RedisServer, tmp_path_factory)


@pytest.fixture(scope="session")
def nats_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServer]:
    """The run's nats-server (JetStream on)."""
    yield from _server(NatsServer, tmp_path_factory)


@pytest.fixture(scope="session")
def lines_server() -> Iterator[Any]:
    """The run's server of the example plug-in channel (kind ``example_lines``)."""
    try:
        from tocsin_example_channel import LinesServer
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("the example plug-in is not installed (scripts/bootstrap.sh --dev "
                        "installs tests/plugins/tocsin_example_channel)")
        pytest.skip("the example plug-in is not installed: pip install -e "
                    "tests/plugins/tocsin_example_channel")
    server = LinesServer().start()
    yield server
    server.stop()


@contextmanager
def _machine(base: Path, *, alone: bool) -> Iterator[None]:
    """Hold the run's machine lock (every xdist worker's): shared by the ordinary tests,
    exclusive for those that need the machine to themselves. A turnstile lock before it gives
    the exclusive one priority: while a test waits for the others to end, none starts."""
    import fcntl

    with open(base / "tocsin-machine.turnstile", "a") as turnstile, \
            open(base / "tocsin-machine.lock", "a") as lock:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            if not alone:
                fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            fcntl.flock(turnstile, fcntl.LOCK_UN)


def machine_alone(tmp_path_factory: pytest.TempPathFactory) -> AbstractContextManager[None]:
    """The machine to the caller alone while no other test of the run runs (for a module
    fixture's own measurement, such as a victim's lateness alone)."""
    return _machine(tmp_path_factory.getbasetemp().parent, alone=True)


@pytest.fixture(autouse=True)
def _machine_shared(request: pytest.FixtureRequest,
                    tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test holds the machine lock shared, but for those that ask for
    :func:`machine_to_itself` (they hold it exclusive)."""
    if "machine_to_itself" in request.fixturenames:
        yield
        return
    with _machine(tmp_path_factory.getbasetemp().parent, alone=False):
        yield


@pytest.fixture
def machine_to_itself(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Run the test while no other test of this run runs, on any xdist worker: the tests that
    measure a victim's lateness beside a neighbour, and those that start several Spark
    applications at once, each take the two cores for themselves. Beside other tests (only
    each other kept apart), the victim's median went from 10 ms to 2 380 ms twice in CI
    (PostgreSQL burst case)."""
    with machine_alone(tmp_path_factory):
        yield

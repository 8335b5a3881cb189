"""Session-wide real servers: one webhook receiver and one Kafka-protocol broker per run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.receiver import Receiver
from tests.support.tansu import Tansu


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

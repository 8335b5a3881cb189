"""Issue 42: the Kafka commands topic over TLS, handshake and all: the ingest query's consumer
(the driver's watermarks, the executors' reads) and its rejects producer reach tansu only
through the test kit's TLS proxy (:class:`~tocsin.testing.tansu.TlsTansu`), configured as an
operator would, with ``TOCSIN_INGEST_KAFKA`` settings. A consumer that trusts another CA stops
the query, naming the refused certificate, and applies nothing. On SQLite only: what is tested
is the topic's transport (test_ingest.py runs the query on both stores)."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.errors import StreamingQueryException

from tests.pipelines.commands_data import make_commands, produce, stored_state, wait_for_state
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec
from tocsin.stores import open_store
from tocsin.testing.certificates import CertificateAuthority
from tocsin.testing.tansu import TlsTansu, read_topic

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

pytestmark = pytest.mark.spark


def _settings(tmp_path: Path, broker: TlsTansu, topic: str, ca: CertificateAuthority) -> Settings:
    """The settings of an ingest of ``topic`` over TLS trusting ``ca`` (a CA file)."""
    ca_file = ca.write(tmp_path / "ca.pem")
    return Settings(store=f"sqlite:///{tmp_path / 'tocsin.db'}", home=tmp_path, buckets=16,
                    ingest_topic=topic, ingest_bootstrap=broker.bootstrap,
                    ingest_kafka=["security.protocol=SSL", f"ssl.ca.location={ca_file}"])


def _topic(broker: TlsTansu) -> str:
    topic = f"commands-{uuid.uuid4().hex[:8]}"
    broker.create_topic(topic, 2)
    broker.create_topic(f"{topic}.rejects", 1)
    return topic


def test_the_commands_topic_is_read_over_tls(spark: SparkSession, kafka_tls: TlsTansu,
                                             tmp_path: Path) -> None:
    from tocsin.pipelines.ingest import start_ingest

    topic = _topic(kafka_tls)
    commands = make_commands(600)
    produce(kafka_tls.bootstrap, topic, commands.messages, client=kafka_tls.client)
    settings = _settings(tmp_path, kafka_tls, topic, kafka_tls.ca)
    store = open_store(settings.store_url, buckets=16)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    before = kafka_tls.proxy.handshakes
    query = start_ingest(spark, settings, trigger_seconds=0.5)
    try:
        assert wait_for_state(store, commands.expected, timeout_s=120) == commands.expected
    finally:
        query.stop()
        store.close()
    assert kafka_tls.proxy.handshakes > before
    rejects = read_topic(kafka_tls.bootstrap, f"{topic}.rejects", 1, expect=commands.bad,
                         client=kafka_tls.client)
    assert len(rejects) == commands.bad == 1
    assert b'"reason": "malformed JSON' in rejects[0].value()


def test_a_consumer_that_trusts_another_ca_stops_the_ingest_and_says_why(
        spark: SparkSession, kafka_tls: TlsTansu, tmp_path: Path) -> None:
    from tocsin.pipelines.ingest import start_ingest

    topic = _topic(kafka_tls)
    commands = make_commands(20)
    produce(kafka_tls.bootstrap, topic, commands.messages, client=kafka_tls.client)
    settings = _settings(tmp_path, kafka_tls, topic, CertificateAuthority.create("Another CA"))
    store = open_store(settings.store_url, buckets=16)
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    refused = len(kafka_tls.proxy.failures)
    query = start_ingest(spark, settings, trigger_seconds=0.5)
    try:
        with pytest.raises(StreamingQueryException) as failed:
            query.awaitTermination(120)
            pytest.fail("the query went on without its topic")
        assert "certificate verify failed" in str(failed.value), failed.value
        assert stored_state(store) == {}
    finally:
        query.stop()
        store.close()
    assert any("unknown ca" in why for why in kafka_tls.proxy.failures[refused:])

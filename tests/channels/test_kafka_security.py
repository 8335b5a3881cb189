"""Issue 42: a Kafka channel's TLS and SASL settings reach librdkafka, against the real
(tansu) broker in plaintext: the same channel that delivers in plaintext cannot deliver once it
asks for TLS or SASL, and says so per envelope, so the settings are applied, not dropped.
tansu speaks neither TLS nor SASL; TLS handshakes that succeed and fail are in
test_kafka_tls.py, through the test kit's TLS proxy. SASL has no server to log in to here."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels.kafka import KafkaChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.testing.certificates import CertificateAuthority
from tocsin.testing.tansu import Tansu


def _ca(folder: Path) -> Path:
    """A throw-away CA's certificate, as a CA file."""
    return CertificateAuthority.create().write(folder / "ca.pem")


def _channel(kafka: Tansu, policy: DestinationPolicy, producer: dict[str, str]) -> KafkaChannel:
    topic = f"t-{uuid.uuid4().hex[:8]}"
    kafka.create_topic(topic)
    return KafkaChannel(ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": kafka.bootstrap, "topic": topic, "flush_timeout": 4,
        "producer": producer}), policy=policy)


@pytest.mark.parametrize("security", [
    {"security.protocol": "SSL"},
    {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
     "sasl.username": "u", "sasl.password": "kafka-secret-3f9a"}])
def test_the_channels_security_settings_reach_librdkafka(kafka: Tansu, tmp_path: Path,
                                                         security: dict[str, str]) -> None:
    policy = DestinationPolicy.build(file_roots=[tmp_path], credential_roots=[tmp_path],
                                     allow_loopback=True)
    plain = _channel(kafka, policy, {})
    try:
        assert [r.outcome for r in plain.send(envelopes(2))] == [Outcome.DELIVERED] * 2
    finally:
        plain.close()
    settings = dict(security)
    if security["security.protocol"] == "SSL":
        settings["ssl.ca.location"] = str(_ca(tmp_path))
    secured = _channel(kafka, policy, settings)
    try:
        results = secured.send(envelopes(2))
    finally:
        secured.close()
    assert {r.outcome for r in results} == {Outcome.RETRY}, results
    assert all("kafka-secret" not in (r.error or "") for r in results)


def test_a_ca_file_outside_the_credential_roots_is_refused(kafka: Tansu, tmp_path: Path) -> None:
    policy = DestinationPolicy.build(file_roots=[tmp_path], credential_roots=[tmp_path / "c"],
                                     allow_loopback=True)
    with pytest.raises(ValidationError) as refused:
        _channel(kafka, policy, {"security.protocol": "SSL",
                                 "ssl.ca.location": str(_ca(tmp_path))})
    assert refused.value.field == "config.producer.ssl.ca.location"

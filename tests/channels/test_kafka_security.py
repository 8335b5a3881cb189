"""Issue 42: a Kafka channel's TLS and SASL settings reach librdkafka, against the real
(tansu) broker. tansu 0.6, the test kit's broker, takes ``--cert`` but goes on serving
plaintext (and refuses ``--cert`` with ``--key``), so no TLS handshake can succeed here: what is
shown is that the settings are applied, not dropped: the same channel that delivers in
plaintext cannot deliver once it asks for TLS or SASL, and says so per envelope."""

from __future__ import annotations

import datetime
import uuid
from pathlib import Path

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels.kafka import KafkaChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.testing.tansu import Tansu


def _ca(folder: Path) -> Path:
    """A self-signed certificate for 127.0.0.1, as a CA file."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
            .sign(key, hashes.SHA256()))
    path = folder / "ca.pem"
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


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

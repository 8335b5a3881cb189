"""The commands topic acts in one tenant, the operator's ``ingest_tenant`` (security review,
round two), on both stores: a command's ``tenant`` was taken as written and a cancel or
reschedule by id without one acted on any tenant, so whoever could produce to the topic was an
admin. The topic's clients take TLS and SASL settings, allow-listed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tocsin.abc import Store
from tocsin.channels.options import kafka_client_settings
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.errors import ValidationError
from tocsin.pipelines.commands import CommandApplier, Message, Outcome
from tocsin.stores import open_store


@pytest.fixture
def store(backend_url: str) -> Iterator[Store]:
    opened = open_store(backend_url, buckets=16)
    for tenant in ("default", "acme", "globex"):
        opened.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING, tenant=tenant))
    yield opened
    opened.close()


def _apply(applier: CommandApplier, *bodies: dict[str, Any]) -> list[Any]:
    now = int(time.time() * 1000)
    return applier.apply([Message("t", 0, i, now, json.dumps(b).encode())
                          for i, b in enumerate(bodies)])


def _victim(store: Store, tenant: str = "globex", key: str = "theirs") -> str:
    now = int(time.time() * 1000)
    [(made, _)] = store.create([NewSchedule(channel="out", payload=b"1", due_ms=now + 3_600_000,
                                            tenant=tenant, key=key)], now_ms=now)
    return made.id


@pytest.mark.parametrize("ingest_tenant", ["default", "acme"])
def test_a_topic_never_reaches_another_tenant(store: Store, ingest_tenant: str) -> None:
    applier = CommandApplier(store, Settings(store="x", ingest_tenant=ingest_tenant))
    theirs = _victim(store)
    refused = _apply(
        applier,
        {"op": "create", "channel": "out", "payload": 1, "delay": 60, "tenant": "globex"},
        {"op": "create", "channel": "out", "payload": 1, "delay": 60, "tenant": ["globex"]},
        {"op": "cancel", "key": "theirs", "tenant": "globex"},
        {"op": "reschedule", "key": "theirs", "tenant": "globex", "delay": 7200})
    assert [(a.outcome, a.field) for a in refused] == [(Outcome.INVALID, "tenant")] * 4
    by_id = _apply(applier, {"op": "cancel", "id": theirs},
                   {"op": "reschedule", "id": theirs, "payload": 2},
                   {"op": "cancel", "key": "theirs"})
    assert [a.outcome for a in by_id] == [Outcome.REFUSED] * 3, by_id
    assert store.get(theirs).status is Status.PENDING and store.get(theirs).payload == b"1"
    assert store.list_schedules(tenant="globex", limit=100) == [store.get(theirs)]


def test_a_topic_acts_in_its_tenant(store: Store) -> None:
    applier = CommandApplier(store, Settings(store="x", ingest_tenant="acme"))
    made = _apply(applier, {"op": "create", "channel": "out", "payload": 1, "delay": 60,
                            "key": "k"},
                  {"op": "create", "channel": "out", "payload": 2, "delay": 60, "key": "k2",
                   "tenant": "acme"})
    assert [a.outcome for a in made] == [Outcome.APPLIED] * 2
    assert {store.get(a.id).tenant for a in made} == {"acme"}
    done = _apply(applier, {"op": "cancel", "id": made[0].id}, {"op": "cancel", "key": "k2"})
    assert [a.outcome for a in done] == [Outcome.APPLIED] * 2
    assert not store.list_schedules(tenant="default", limit=10)


@pytest.mark.parametrize("name", ["..", "", "a/b", "x\n"])
def test_the_topics_tenant_is_a_tenant_name(name: str) -> None:
    with pytest.raises(ValueError, match="tenant"):
        Settings(store="x", ingest_tenant=name)


def test_the_topics_clients_take_tls_and_sasl_allow_listed() -> None:
    entries = ["security.protocol=SASL_SSL", "sasl.mechanism=SCRAM-SHA-512",
               "sasl.username=tocsin", "sasl.password=s3=cret", "ssl.ca.location=/etc/ca.pem"]
    assert kafka_client_settings(entries) == {
        "security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "tocsin", "sasl.password": "s3=cret", "ssl.ca.location": "/etc/ca.pem"}
    for bad in ("plugin.library.paths=/tmp/evil.so", "sasl.kerberos.kinit.cmd=id",
                "sasl.oauthbearer.token.endpoint.url=http://169.254.169.254/",
                "ssl.engine.location=/x.so", "bootstrap.servers=10.0.0.1:9092", "no-equals"):
        with pytest.raises(ValidationError) as refused:
            kafka_client_settings([bad])
        assert refused.value.field == "ingest_kafka"
    assert Settings(store="x", ingest_kafka="security.protocol=SSL,client.id=t").ingest_kafka \
        == ["security.protocol=SSL", "client.id=t"]


def test_the_topics_sasl_password_is_redacted() -> None:
    from tocsin.redact import MASK, redact

    shown = redact(Settings(store="x", ingest_kafka="sasl.username=u,sasl.password=p4ss")
                   .model_dump(mode="json"))
    assert shown["ingest_kafka"] == ["sasl.username=u", f"sasl.password={MASK}"]


@pytest.mark.parametrize("name", ["..", "../x", "a b"])
def test_tocsin_ingest_checks_its_tenant(name: str) -> None:
    from typer.testing import CliRunner

    from tocsin.cli import app

    done = CliRunner().invoke(app, ["ingest", "--topic", "t", "--tenant", name])
    assert done.exit_code == 1 and "tenant" in done.output, done.output

"""The destination policy (issue 10): where a caller may point a channel, and where not.

Each refusal below was accepted before the policy existed; the allowed paths still deliver.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels import validate_channel_config
from tocsin.channels.file import FileChannel
from tocsin.channels.policy import DestinationPolicy
from tocsin.channels.webhook import WebhookChannel
from tocsin.config import Settings
from tocsin.domain import ChannelKind, ChannelSpec, Outcome
from tocsin.errors import ValidationError
from tocsin.testing.receiver import Receiver


@pytest.fixture
def home(tmp_path: Path) -> Path:
    return tmp_path / "home"


@pytest.fixture
def server(home: Path, monkeypatch: pytest.MonkeyPatch) -> DestinationPolicy:
    """A server deployment's default policy: nothing set but TOCSIN_HOME."""
    for name in ("TOCSIN_WEBHOOK_ALLOW", "TOCSIN_FILE_ROOTS", "TOCSIN_CREDENTIAL_ROOTS"):
        monkeypatch.delenv(name, raising=False)
    return DestinationPolicy.from_settings(Settings(home=home))


def _refused(kind: ChannelKind, config: dict[str, object], policy: DestinationPolicy) -> str:
    with pytest.raises(ValidationError) as err:
        validate_channel_config(kind, config, policy)
    return err.value.field


@pytest.mark.parametrize("path", [
    os.path.expanduser("~/.bashrc"), "/root/.profile", "/etc/cron.d/tocsin",
    "/etc/profile.d/x.sh", "/proc/self/mem", "/proc/self/fd/1", "/dev/null",
    "../escape.jsonl", "a/../../b.jsonl", "sub/\0.jsonl", "line\nbreak", "", "dir/", ".",
    "x" * 300,
])
def test_file_paths_outside_the_roots_or_malformed_are_refused(path: str,
                                                               server: DestinationPolicy) -> None:
    assert _refused(ChannelKind.FILE, {"path": path}, server) == "config.path"


def test_the_stores_own_database_is_refused(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_FILE_ROOTS", str(home))  # even with home itself as a root
    policy = DestinationPolicy.from_settings(Settings(home=home))
    for name in ("tocsin.db", "tocsin.db-wal"):
        assert _refused(ChannelKind.FILE, {"path": str(home / name)}, policy) == "config.path"
        assert _refused(ChannelKind.FILE, {"path": name}, policy) == "config.path"


def test_a_relative_path_lands_under_the_first_root_and_is_stored_as_given(
        home: Path, server: DestinationPolicy) -> None:
    config = validate_channel_config(ChannelKind.FILE, {"path": "team/out.jsonl"}, server)
    assert config == {"path": "team/out.jsonl"}
    channel = FileChannel(ChannelSpec(name="c", kind=ChannelKind.FILE, config=config),
                          policy=server)
    assert {r.outcome for r in channel.send(envelopes(2))} == {Outcome.DELIVERED}
    assert len((home / "channels" / "team" / "out.jsonl").read_text().splitlines()) == 2


def test_an_absolute_path_under_a_root_is_accepted(home: Path, server: DestinationPolicy) -> None:
    path = str(home / "channels" / "abs.jsonl")
    assert validate_channel_config(ChannelKind.FILE, {"path": path}, server) == {"path": path}


@pytest.mark.parametrize("where", ["file", "directory"])
def test_a_symlink_below_the_root_is_not_followed(tmp_path: Path, home: Path, where: str,
                                                  server: DestinationPolicy) -> None:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "out.jsonl").write_text("precious\n")
    root = home / "channels"
    root.mkdir(parents=True)
    if where == "file":
        (root / "out.jsonl").symlink_to(victim / "out.jsonl")
    else:
        (root / "sub").symlink_to(victim)
    path = "out.jsonl" if where == "file" else "sub/out.jsonl"
    channel = FileChannel(ChannelSpec(name="c", kind=ChannelKind.FILE, config={"path": path}),
                          policy=server)
    results = channel.send(envelopes(1))
    assert results[0].outcome is Outcome.REJECTED and "refused" in (results[0].error or "")
    assert str(victim) not in (results[0].error or "")  # nothing resolved is echoed
    assert (victim / "out.jsonl").read_text() == "precious\n"


def test_a_hard_link_below_the_root_is_refused(tmp_path: Path, home: Path,
                                               server: DestinationPolicy) -> None:
    victim = tmp_path / "victim.sh"
    victim.write_text("echo hi\n")
    (home / "channels").mkdir(parents=True)
    os.link(victim, home / "channels" / "out.jsonl")
    channel = FileChannel(ChannelSpec(name="c", kind=ChannelKind.FILE,
                                      config={"path": "out.jsonl"}), policy=server)
    assert channel.send(envelopes(1))[0].outcome is Outcome.REJECTED
    assert victim.read_text() == "echo hi\n"


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8765/v1/schedules", "http://localhost/", "http://[::1]/",
    "http://169.254.169.254/latest/meta-data/", "http://10.0.0.5/", "http://192.168.1.1/",
    "http://172.16.0.1/", "http://100.64.0.1/", "http://0.0.0.0/", "http://224.0.0.1/",
    "http://240.0.0.1/", "http://[::ffff:127.0.0.1]/", "http://[fe80::1]/",
    "http://2130706433/", "http://0x7f000001/", "http://0177.0.0.1/", "http://127.1/",
    "http://0x7f.1/",
])
def test_webhooks_to_non_public_addresses_are_refused_by_default(
        url: str, server: DestinationPolicy) -> None:
    assert _refused(ChannelKind.WEBHOOK, {"url": url}, server) == "config.url"


def test_the_allow_list_admits_networks_and_host_names(server: DestinationPolicy) -> None:
    policy = DestinationPolicy.build(file_roots=server.file_roots,
                                     webhook_allow=["127.0.0.0/8", "::1", "hooks.internal"])
    for url in ("http://127.0.0.1:9/", "http://[::1]/", "http://2130706433/",
                "http://hooks.internal/"):
        validate_channel_config(ChannelKind.WEBHOOK, {"url": url}, policy)
    assert _refused(ChannelKind.WEBHOOK, {"url": "http://10.0.0.1/"}, policy) == "config.url"
    with pytest.raises(ValidationError) as err:
        DestinationPolicy.build(file_roots=["/x"], webhook_allow=["not a host"])
    assert err.value.field == "webhook_allow"


def test_a_public_address_is_accepted(server: DestinationPolicy) -> None:
    config = {"url": "https://93.184.215.14/hook"}
    assert validate_channel_config(ChannelKind.WEBHOOK, config, server) == config


def test_a_name_resolving_to_loopback_is_refused_at_connect_time(
        receiver: Receiver, server: DestinationPolicy) -> None:
    """``localhost`` stands for a name whose DNS answer changes after registration: the
    channel checks the address it is about to connect to, whatever registration saw."""
    spec = ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                       config={"url": f"http://localhost:{receiver.port}/in"})
    channel = WebhookChannel(spec, policy=server)
    [result] = channel.send(envelopes(1))
    channel.close()
    assert result.outcome is Outcome.REJECTED and "loopback" in (result.error or "")
    assert receiver.received(None) == []
    allowed = DestinationPolicy.build(file_roots=server.file_roots, webhook_allow=["127.0.0.1"])
    channel = WebhookChannel(spec, policy=allowed)
    assert channel.send(envelopes(1))[0].outcome is Outcome.DELIVERED
    channel.close()


def test_a_literal_loopback_url_is_never_connected(receiver: Receiver,
                                                  server: DestinationPolicy) -> None:
    for host in ("127.0.0.1", "2130706433"):
        spec = ChannelSpec(name="hook", kind=ChannelKind.WEBHOOK,
                           config={"url": f"http://{host}:{receiver.port}/"})
        channel = WebhookChannel(spec, policy=server)
        assert channel.send(envelopes(1))[0].outcome is Outcome.REJECTED
        channel.close()
    assert receiver.received(None) == []


@pytest.mark.parametrize(("producer", "field"), [
    ({"plugin.library.paths": "/tmp/evil.so"}, "config.producer.plugin.library.paths"),
    ({"ssl.engine.location": "/tmp/evil.so"}, "config.producer.ssl.engine.location"),
    ({"sasl.kerberos.kinit.cmd": "sh -c id"}, "config.producer.sasl.kerberos.kinit.cmd"),
    ({"sasl.oauthbearer.token.endpoint.url": "http://169.254.169.254/"},
     "config.producer.sasl.oauthbearer.token.endpoint.url"),
    ({"ssl.key.location": "/etc/ssl/private/server.key"}, "config.producer.ssl.key.location"),
    ({"ssl.ca.location": "../../etc/passwd"}, "config.producer.ssl.ca.location"),
])
def test_kafka_client_options_outside_the_allow_list_are_refused(
        producer: dict[str, object], field: str, server: DestinationPolicy) -> None:
    config = {"bootstrap_servers": "127.0.0.1:1", "topic": "t", "producer": producer}
    assert _refused(ChannelKind.KAFKA, config, server) == field


def test_kafka_tls_files_under_the_credential_roots_are_accepted(
        home: Path, server: DestinationPolicy) -> None:
    config = {"bootstrap_servers": "127.0.0.1:1", "topic": "t",
              "producer": {"ssl.ca.location": str(home / "credentials" / "ca.pem"),
                           "ssl.key.location": "client.key", "linger.ms": 10}}
    assert validate_channel_config(ChannelKind.KAFKA, config, server) == config


@pytest.mark.parametrize("query", ["ssl_options=%7B%22keyfile%22%3A%22%2Fetc%2Fshadow%22%7D",
                                   "tcp_options=%7B%7D", "backpressure_detection=t"])
def test_rabbitmq_url_options_outside_the_allow_list_are_refused(
        query: str, server: DestinationPolicy) -> None:
    config = {"url": f"amqp://guest:guest@127.0.0.1:5672/%2F?{query}", "routing_key": "q"}
    assert _refused(ChannelKind.RABBITMQ, config, server) == "config.url"
    ok = {"url": "amqp://guest:guest@127.0.0.1:5672/%2F?heartbeat=30", "routing_key": "q"}
    assert validate_channel_config(ChannelKind.RABBITMQ, ok, server) == ok


def test_a_dispatcher_refuses_options_registered_under_another_policy(
        server: DestinationPolicy) -> None:
    """A channel built in a dispatcher process checks its options again, before any client
    library sees them."""
    from tocsin.channels.kafka import KafkaChannel
    from tocsin.channels.rabbitmq import RabbitMQChannel

    kafka = ChannelSpec(name="k", kind=ChannelKind.KAFKA, config={
        "bootstrap_servers": "127.0.0.1:1", "topic": "t",
        "producer": {"plugin.library.paths": "/tmp/evil.so"}})
    with pytest.raises(ValidationError):
        KafkaChannel(kafka, policy=server)
    rabbit = ChannelSpec(name="r", kind=ChannelKind.RABBITMQ, config={
        "url": "amqp://guest:guest@127.0.0.1:1/%2F?ssl_options=x", "routing_key": "q"})
    with pytest.raises(ValidationError):
        RabbitMQChannel(rabbit, policy=server)


def test_each_tenant_has_its_own_file_and_credential_roots(home: Path,
                                                          server: DestinationPolicy) -> None:
    """Two tenants' channels named ``out`` write two files, and neither can name the other's
    files or TLS keys."""
    from dataclasses import dataclass

    @dataclass(frozen=True, kw_only=True)
    class TenantSpec(ChannelSpec):  # ChannelSpec gains its tenant on the store's branch
        tenant: str = "default"

    for tenant in ("default", "acme"):
        config = validate_channel_config(ChannelKind.FILE, {}, server, tenant=tenant)
        spec = TenantSpec(name="out", kind=ChannelKind.FILE, config=config, tenant=tenant)
        assert FileChannel(spec, policy=server).send(envelopes(1))[0].outcome is \
            Outcome.DELIVERED
    assert (home / "channels" / "out.jsonl").exists()
    assert (home / "channels" / "tenants" / "acme" / "out.jsonl").exists()
    acme = str(home / "channels" / "tenants" / "acme" / "x.jsonl")
    validate_channel_config(ChannelKind.FILE, {"path": acme}, server, tenant="acme")
    validate_channel_config(ChannelKind.FILE, {"path": "x.jsonl"}, server, tenant="acme")
    for path in (acme, "tenants/acme/x.jsonl"):  # the default tenant cannot reach acme's
        with pytest.raises(ValidationError):
            validate_channel_config(ChannelKind.FILE, {"path": path}, server)
    with pytest.raises(ValidationError):  # nor acme the default tenant's
        validate_channel_config(ChannelKind.FILE, {"path": str(home / "channels" / "y")},
                                server, tenant="acme")
    key = {"bootstrap_servers": "127.0.0.1:1", "topic": "t",
           "producer": {"ssl.key.location": str(home / "credentials" / "tenants" / "globex"
                                                / "client.key")}}
    with pytest.raises(ValidationError) as err:
        validate_channel_config(ChannelKind.KAFKA, key, server, tenant="acme")
    assert err.value.field == "config.producer.ssl.key.location"

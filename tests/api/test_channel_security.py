"""Issue 10's channel findings over real HTTP, on both stores: destinations a server refuses
by default, and secrets that never come back."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.channels.envelopes import SECRET, SECRET_2
from tocsin.abc import Store
from tocsin.config import Settings
from tocsin.testing.api_server import ApiServer


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("home")


@pytest.fixture(scope="module")
def strict(api_store: Store, home: Path) -> Iterator[httpx.Client]:
    """An API with a server deployment's default policy (no allow-list, roots = home/channels)."""
    settings = Settings(home=home, webhook_allow=[], file_roots=[], credential_roots=[])
    server = ApiServer(api_store, settings).start()
    with httpx.Client(base_url=server.url, timeout=30, headers=server.headers) as client:
        yield client
    server.stop()


def _field(r: httpx.Response) -> str:
    assert r.status_code == 422, r.text
    field: str = r.json()["error"]["field"]
    return field


@pytest.mark.parametrize("path", [
    os.path.expanduser("~/.bashrc"), "/etc/profile.d/tocsin.sh", "/proc/self/environ",
    "../tocsin.db", "a\u0000b",
])
def test_file_channels_outside_the_roots_are_refused(strict: httpx.Client, home: Path,
                                                     path: str) -> None:
    body = {"name": "f", "kind": "file", "config": {"path": path}}
    assert _field(strict.post("/v1/channels", json=body)) == "config.path"
    db = {"name": "f", "kind": "file", "config": {"path": str(home / "tocsin.db")}}
    assert _field(strict.post("/v1/channels", json=db)) == "config.path"
    assert strict.get("/v1/channels/f").status_code == 404


def test_the_answer_holds_the_path_as_given(strict: httpx.Client) -> None:
    r = strict.post("/v1/channels", json={"name": "g", "kind": "file",
                                          "config": {"path": "greetings.jsonl"}})
    assert r.status_code == 201 and r.json()["config"] == {"path": "greetings.jsonl"}


@pytest.mark.parametrize("url", [
    "http://127.0.0.1:8765/v1/channels", "http://localhost:8765/", "http://169.254.169.254/",
    "http://10.0.0.7/", "http://2130706433/", "http://0x7f.0.0.1/", "http://[::1]/",
])
def test_webhooks_to_internal_addresses_are_refused(strict: httpx.Client, url: str) -> None:
    body = {"name": "w", "kind": "webhook", "config": {"url": url}}
    assert _field(strict.post("/v1/channels", json=body)) == "config.url"


def test_kafka_plugin_library_paths_is_refused(strict: httpx.Client) -> None:
    body = {"name": "k", "kind": "kafka", "config": {
        "bootstrap_servers": "127.0.0.1:9092", "topic": "t",
        "producer": {"plugin.library.paths": "/tmp/evil.so"}}}
    assert _field(strict.post("/v1/channels", json=body)) == \
        "config.producer.plugin.library.paths"


def test_secrets_never_come_back(api: httpx.Client) -> None:
    secrets = [SECRET, SECRET_2, "Bearer tok-123", "hunter2", "sasl-pw-9", "amqp-pw-7",
               "pem-key-5"]
    channels = [
        {"name": "s-hook", "kind": "webhook", "config": {
            "url": "http://127.0.0.1:9/in", "secret": [SECRET, SECRET_2],
            "headers": {"Authorization": "Bearer tok-123", "X-Api-Key": "hunter2",
                        "X-Trace": "visible"}}},
        {"name": "s-kafka", "kind": "kafka", "config": {
            "bootstrap_servers": "127.0.0.1:9092", "topic": "t",
            "producer": {"sasl.username": "me", "sasl.password": "sasl-pw-9",
                         "ssl.key.pem": "pem-key-5"}}},
        {"name": "s-rabbit", "kind": "rabbitmq", "config": {
            "url": "amqp://me:amqp-pw-7@127.0.0.1:5672/%2F", "routing_key": "q"}},
    ]
    answers = []
    for body in channels:
        r = api.post("/v1/channels", json=body)
        assert r.status_code == 201, r.text
        answers += [r.text, api.get(f"/v1/channels/{body['name']}").text]
    answers.append(api.get("/v1/channels").text)
    for text in answers:
        assert not [s for s in secrets if s in text]
    hook = api.get("/v1/channels/s-hook").json()["config"]
    assert hook["secret"] == ["***", "***"]
    assert hook["headers"] == {"Authorization": "***", "X-Api-Key": "***", "X-Trace": "visible"}
    assert api.get("/v1/channels/s-kafka").json()["config"]["producer"]["sasl.username"] == "me"
    assert api.get("/v1/channels/s-rabbit").json()["config"]["url"] == \
        "amqp://me:***@127.0.0.1:5672/%2F"


@pytest.mark.parametrize("config", [
    {"kind": "kafka", "config": {"bootstrap_servers": "PLAINTEXT://10.0.0.7:9092",
                                 "topic": "t"}},
    {"kind": "kafka", "config": {"bootstrap_servers": "SASL_SSL://[fd00::1]:9092",
                                 "topic": "t"}},
    {"kind": "kafka", "config": {"bootstrap_servers": "nowhere.invalid:9092", "topic": "t"}},
    {"kind": "rabbitmq", "config": {"url": "amqp://u:p\\@10.1.2.3/", "exchange": "",
                                    "routing_key": "q"}},
    {"kind": "webhook", "config": {"url": "https://nowhere.invalid/hook"}},
], ids=["plaintext-prefix", "sasl-ssl-ipv6", "unresolved", "amqp-backslash", "webhook-dns"])
def test_broker_policy_bypasses_are_refused(strict: httpx.Client, config: dict[str, Any]) -> None:
    """Issue 40, finding 2: read as the client library reads it, and fail closed."""
    field = "config.url" if config["kind"] != "kafka" else "config.bootstrap_servers"
    assert _field(strict.post("/v1/channels", json={"name": "b", **config})) == field
    assert strict.get("/v1/channels/b").status_code == 404


WEBHOOK_SECRETS = {
    "slack": ("https://hooks.slack.com/services/T0001/B0001/slackSECRET123", "slackSECRET123"),
    "discord": ("https://discord.com/api/webhooks/123/discordTOKEN456", "discordTOKEN456"),
    "azure-logic": ("https://prod-01.westeurope.logic.azure.com:443/workflows/w/triggers/"
                    "manual/paths/invoke?api-version=2016-10-01&sv=1.0&sig=azSIG789",
                    "azSIG789"),
    "azure-func": ("https://fn.azurewebsites.net/api/hook?code=funcCODE012", "funcCODE012"),
    "google-chat": ("https://chat.googleapis.com/v1/spaces/AAA/messages?key=gKEY345"
                    "&token=gTOKEN678", "gTOKEN678"),
}


def test_secrets_in_webhook_urls_are_hidden_from_a_read_only_key(
        api: httpx.Client, api_store: Store) -> None:
    """Issue 40, finding 5: the path of a Slack/Discord/Azure/Google webhook URL, and its
    ``code``/``sig``/``key``/``token`` parameters, are secrets: the origin alone shows."""
    from tocsin.apikeys.tokens import issue_key
    from tocsin.domain import ChannelKind, ChannelSpec, Role

    for name, (url, _) in WEBHOOK_SECRETS.items():
        api_store.put_channel(ChannelSpec(name=f"u-{name}", kind=ChannelKind.WEBHOOK,
                                          config={"url": url}))
    _, token = issue_key(api_store, role=Role.ADMIN, read_only=True, now_ms=0)
    reader = {"authorization": f"Bearer {token}"}
    answers = [api.get("/v1/channels", headers=reader).text]
    answers += [api.get(f"/v1/channels/u-{name}", headers=reader).text
                for name in WEBHOOK_SECRETS]
    for text in answers:
        assert not [s for _, s in WEBHOOK_SECRETS.values() if s in text], text
    shown = api.get("/v1/channels/u-slack", headers=reader).json()["config"]["url"]
    assert shown == "https://hooks.slack.com/***"
    assert "gKEY345" not in answers[0]

"""Secrets are write-only: one redaction function, and the places a configuration leaves the
process (``tocsin config``, the startup line of ``tocsin api``/``tocsin up``, CLI output)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tocsin.cli import app
from tocsin.redact import MASK, redact, redact_url
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer, free_port
from tocsin.testing.dispatch import wait_until
from tocsin.testing.processes import kill_tree, start_tocsin


def test_redact_hides_secret_keys_headers_and_url_passwords() -> None:
    config = {
        "url": "https://hooks.example/in?token=abc&x=1", "secret": ["whsec_a", "whsec_b"],
        "headers": {"Authorization": "Bearer t", "Cookie": "c=1", "X-Trace": "t1"},
        "producer": {"sasl.password": "p", "ssl.key.password": "k", "ssl.key.pem": "K",
                     "sasl.oauthbearer.client.secret": "s", "linger.ms": 5},
        "amqp": "amqp://me:pw@h:5672/%2F", "empty_secret": "", "none_password": None,
    }
    assert redact(config) == {
        "url": "https://hooks.example/in?token=***&x=1", "secret": [MASK, MASK],
        "headers": {"Authorization": MASK, "Cookie": MASK, "X-Trace": "t1"},
        "producer": {"sasl.password": MASK, "ssl.key.password": MASK, "ssl.key.pem": MASK,
                     "sasl.oauthbearer.client.secret": MASK, "linger.ms": 5},
        "amqp": "amqp://me:***@h:5672/%2F", "empty_secret": "", "none_password": None,
    }
    assert redact_url("postgresql://tocsin:s3@db:5432/t?sslmode=require") == \
        "postgresql://tocsin:***@db:5432/t?sslmode=require"
    assert redact_url("sqlite:////var/lib/tocsin.db") == "sqlite:////var/lib/tocsin.db"
    assert redact_url("not a url: pw") == "not a url: pw"


def test_tocsin_config_redacts_the_store_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_STORE", "postgresql://tocsin:hunter2@db.internal:5432/t")
    result = CliRunner().invoke(app, ["config"])
    assert result.exit_code == 0, result.output
    assert "hunter2" not in result.output
    assert json.loads(result.output)["store"] == "postgresql://tocsin:***@db.internal:5432/t"


def test_cli_channel_output_is_redacted(tmp_path: Path) -> None:
    server = ApiServer(SQLiteStore(tmp_path / "t.db", buckets=8)).start()
    try:
        config = json.dumps({"headers": {"Authorization": "Bearer tok-1"}})
        runner = CliRunner(env={"TOCSIN_API_KEY": server.admin_key})
        added = runner.invoke(app, ["channels", "add", "h", "--kind", "webhook", "--url",
                                    "http://127.0.0.1:9/", "--config", config,
                                    "--api", server.url])
        listed = runner.invoke(app, ["channels", "ls", "--api", server.url])
    finally:
        server.stop()
    assert added.exit_code == 0 and listed.exit_code == 0, added.output + listed.output
    assert "tok-1" not in added.output + listed.output and MASK in listed.output


@pytest.mark.spark
def test_the_startup_line_redacts_the_store_password(postgres_url: str, tmp_path: Path) -> None:
    """``tocsin api`` on PostgreSQL with a password in the URL (the test server trusts
    loopback, so the password is accepted and ignored)."""
    from tocsin.testing.postgres import create_schema, drop_schema

    url = create_schema(postgres_url)
    with_password = re.sub(r"^postgresql://([^@/:]+)@", r"postgresql://\1:hunter2@", url)
    assert "hunter2" in with_password
    port = free_port()
    log = tmp_path / "api.log"
    api = start_tocsin("api", env={"TOCSIN_STORE": with_password, "TOCSIN_API_PORT": str(port),
                                   "TOCSIN_HOME": str(tmp_path / "home")}, log=log)
    try:
        wait_until(lambda: "listening" in log.read_text(), timeout_s=60, what="startup line")
    finally:
        kill_tree(api, sig=15)
        drop_schema(postgres_url, url)
    text = log.read_text()
    assert "hunter2" not in text and ":***@" in text


@pytest.mark.parametrize("config", [
    {"url": "http://127.0.0.1:9/", "headers": {"Authorization": "***"}},
    {"url": "http://127.0.0.1:9/", "secret": ["***"]},
])
def test_a_redacted_config_sent_back_is_refused(config: dict[str, object]) -> None:
    from tocsin.channels import validate_channel_config
    from tocsin.domain import ChannelKind
    from tocsin.errors import ValidationError

    with pytest.raises(ValidationError) as err:
        validate_channel_config(ChannelKind.WEBHOOK, config)
    assert err.value.field in ("config.headers.Authorization", "config.secret")
    rabbit = {"url": "amqp://me:***@h/%2F", "routing_key": "q"}
    with pytest.raises(ValidationError) as err:
        validate_channel_config(ChannelKind.RABBITMQ, rabbit)
    assert err.value.field == "config.url"

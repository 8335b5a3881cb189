"""``tocsin import``, ``ingest`` and the other Spark jobs refuse bad options before starting
Spark."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tocsin.cli import app

runner = CliRunner()


def test_import_refuses_bad_options(tmp_path: Path) -> None:
    """A mapping that is not FIELD=COLUMN, a file whose format cannot be told, or a zone
    that is not an IANA zone is an error naming the option; nothing runs."""
    data = tmp_path / "rows.txt"
    data.write_text('{"channel": "out"}\n')
    store = f"sqlite:///{tmp_path / 't.db'}"
    bad_map = runner.invoke(app, ["import", str(data), "--format", "json", "--map", "channel",
                                  "--store", store])
    assert bad_map.exit_code == 1
    assert "map" in bad_map.output and "FIELD=COLUMN" in bad_map.output
    no_format = runner.invoke(app, ["import", str(data), "--store", store])
    assert no_format.exit_code == 1
    assert "--format" in no_format.output
    for options, said in (
            (["--format", "json", "--map", "nope=channel"], "'nope' is not a field of a schedule"),
            (["--format", "json", "--map", "channel=a", "--map", "channel=b"],
             "'channel' is mapped twice"),
            (["--format", "xml"], "format: 'xml' is not json, csv or parquet"),
            (["--format", "json", "--zone", "Mars/Base"],
             "--zone: unknown IANA time zone 'Mars/Base'"),
            (["--format", "json", "--zone", "Europe"], "--zone: unknown IANA time zone"),
            (["--recurring", "--zone", "UTC"], "no --zone (a rule has its own timezone)")):
        refused = runner.invoke(app, ["import", str(data), *options, "--store", store])
        assert refused.exit_code == 1 and said in refused.output, refused.output
    assert not (tmp_path / "t.db").exists()


@pytest.mark.parametrize("command", [["import", "rows.jsonl"], ["archive"],
                                     ["report"], ["bulk", "cancel", "--channel", "out"],
                                     ["bulk", "reschedule", "--channel", "out", "--shift", "60"]])
def test_the_spark_jobs_want_one_partition_at_least(tmp_path: Path, command: list[str]) -> None:
    """``--partitions 0`` or below is refused, naming the option, before anything runs (Spark
    answered with its own stack trace, or the job took another count, or did nothing)."""
    (tmp_path / "rows.jsonl").write_text('{"channel": "out"}\n')
    store = f"sqlite:///{tmp_path / 't.db'}"
    for count in ("0", "-3"):
        result = runner.invoke(app, [*command, "--partitions", count, "--store", store],
                               env={"TOCSIN_HOME": str(tmp_path)})
        said = " ".join(result.output.replace("│", " ").split())
        assert result.exit_code == 2, said
        assert "Invalid value for '--partitions'" in said
        assert "greater than or equal to 1" in said
    assert not (tmp_path / "t.db").exists()


def test_report_refuses_bad_figures_before_spark_starts(tmp_path: Path) -> None:
    """A ``--since`` that is no span (``inf`` raised an OverflowError) or a negative ``--sla``
    is an error naming the option, before any Spark session or store is opened."""
    store = f"sqlite:///{tmp_path / 't.db'}"
    for since in ("inf", "soon", "0"):
        result = runner.invoke(app, ["report", "--since", since, "--store", store])
        assert result.exit_code == 1 and "since" in result.output, result.output
    negative = runner.invoke(app, ["report", "--sla", "-5", "--store", store])
    said = " ".join(negative.output.replace("│", " ").split())
    assert negative.exit_code == 2 and "Invalid value for '--sla'" in said, said
    assert not (tmp_path / "t.db").exists()


def test_ingest_needs_a_topic(tmp_path: Path) -> None:
    """Without a commands topic, ``tocsin ingest`` says which setting to give."""
    result = runner.invoke(app, ["ingest", "--store", f"sqlite:///{tmp_path / 't.db'}"],
                           env={"TOCSIN_INGEST_TOPIC": ""})
    assert result.exit_code == 1
    assert "TOCSIN_INGEST_TOPIC" in result.output


def test_import_takes_the_tenant_from_the_callers_key(tmp_path: Path) -> None:
    """With ``TOCSIN_API_KEY`` set, the key decides the tenant as on the API: a tenant key
    writes to its own tenant only, a read-only or unknown key imports nothing."""
    from tocsin.apikeys.tokens import issue_key
    from tocsin.cli.jobs import import_tenant
    from tocsin.config import Settings
    from tocsin.domain import Role
    from tocsin.errors import AuthenticationError, ForbiddenError
    from tocsin.stores import open_store

    url = f"sqlite:///{tmp_path / 't.db'}"
    store = open_store(url, buckets=8)
    acme = issue_key(store, role=Role.TENANT, tenant="acme", now_ms=0)[1]
    reader = issue_key(store, role=Role.TENANT, tenant="acme", read_only=True, now_ms=0)[1]
    admin = issue_key(store, role=Role.ADMIN, now_ms=0)[1]
    store.close()

    def tenant(key: str, named: str | None) -> str | None:
        return import_tenant(Settings(store=url, api_key=key), named)

    assert tenant(acme, None) == "acme" and tenant(acme, "acme") == "acme"
    assert tenant(admin, "globex") == "globex" and tenant(admin, None) is None
    for key, named, error in ((acme, "globex", ForbiddenError), (reader, None, ForbiddenError),
                              ("tsk_key_0123456789abcdef_" + "0" * 64, None,
                               AuthenticationError)):
        with pytest.raises(error):
            tenant(key, named)
    data = tmp_path / "rows.jsonl"
    data.write_text('{"channel": "out", "payload": 1, "delay": 60}\n')
    refused = runner.invoke(app, ["import", str(data), "--store", url, "--tenant", "globex"],
                            env={"TOCSIN_API_KEY": acme})
    assert refused.exit_code == 1 and "tenant" in refused.output

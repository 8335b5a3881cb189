"""``tocsin import`` and ``tocsin ingest`` refuse bad options before starting Spark."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from tocsin.cli import app

runner = CliRunner()


def test_import_refuses_bad_options(tmp_path: Path) -> None:
    """A mapping that is not FIELD=COLUMN, or a file whose format cannot be told, is an
    error naming the option; nothing runs."""
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
    assert not (tmp_path / "t.db").exists()


def test_ingest_needs_a_topic(tmp_path: Path) -> None:
    """Without a commands topic, ``tocsin ingest`` says which setting to give."""
    result = runner.invoke(app, ["ingest", "--store", f"sqlite:///{tmp_path / 't.db'}"],
                           env={"TOCSIN_INGEST_TOPIC": ""})
    assert result.exit_code == 1
    assert "TOCSIN_INGEST_TOPIC" in result.output

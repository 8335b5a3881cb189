"""Checkpoint locations: one base setting kept as given (a path or any URI), each query in a
folder under it, shown by ``tocsin config``; the layout before 0.2.0 moved into place once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tocsin.cli import app
from tocsin.config import CheckpointQuery, Settings
from tocsin.spark.checkpoints import adopt_legacy_checkpoints, local_path

BASES = ["hdfs://nn.internal:8020/tocsin/ck", "s3a://bucket/tocsin/ck",
         "file:///var/lib/tocsin/ck", "/var/lib/tocsin/ck", "relative/ck"]


@pytest.mark.parametrize("base", BASES)
def test_each_query_is_under_the_base_as_given(base: str) -> None:
    settings = Settings(checkpoint=base)
    assert settings.checkpoint_base == base
    assert {q: settings.checkpoint_for(q) for q in CheckpointQuery} == {
        q: f"{base}/{q.value}" for q in CheckpointQuery}


@pytest.mark.parametrize("base", BASES)
def test_the_setting_survives_the_environment(base: str, monkeypatch: pytest.MonkeyPatch
                                              ) -> None:
    """From the environment, and handed on to a child process (``tocsin up``'s dispatcher),
    the URI keeps both slashes."""
    monkeypatch.setenv("TOCSIN_CHECKPOINT", base + "/")
    env = Settings().environment()
    assert env["TOCSIN_CHECKPOINT"] == base + "/"
    monkeypatch.setenv("TOCSIN_CHECKPOINT", env["TOCSIN_CHECKPOINT"])
    assert Settings().checkpoint_for(CheckpointQuery.INGEST) == f"{base}/ingest"


def test_the_default_is_an_absolute_folder_under_home(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Made absolute when read, so the driver's working directory does not move it."""
    monkeypatch.chdir(tmp_path)
    settings = Settings(home=Path(".tocsin"))
    assert settings.checkpoint_for(CheckpointQuery.RELAY) == str(
        tmp_path / ".tocsin" / "checkpoint" / "relay")


def test_tocsin_config_shows_every_checkpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOCSIN_CHECKPOINT", "hdfs://nn.internal:8020/tocsin/ck")
    shown = CliRunner().invoke(app, ["config"])
    assert shown.exit_code == 0, shown.output
    printed = json.loads(shown.output)
    assert printed["checkpoint"] == "hdfs://nn.internal:8020/tocsin/ck"
    assert printed["checkpoints"] == {
        "dispatcher": "hdfs://nn.internal:8020/tocsin/ck/dispatcher",
        "relay": "hdfs://nn.internal:8020/tocsin/ck/relay",
        "expander": "hdfs://nn.internal:8020/tocsin/ck/expander",
        "ingest": "hdfs://nn.internal:8020/tocsin/ck/ingest"}


def test_a_secret_in_the_uri_is_not_shown() -> None:
    shown = Settings(checkpoint="s3a://key:hunter2@bucket/ck").summary()
    assert "hunter2" not in json.dumps(shown)


def test_local_paths() -> None:
    assert local_path("file:///var/lib/t%20k/ck") == Path("/var/lib/t k/ck")
    assert local_path("/var/lib/ck") == Path("/var/lib/ck")
    assert local_path("ck") == Path("ck")
    assert local_path("hdfs://nn:8020/ck") is None
    assert local_path("s3a://bucket/ck") is None


def _spark_checkpoint(folder: Path, marker: str) -> None:
    (folder / "offsets").mkdir(parents=True)
    (folder / "metadata").write_text(json.dumps({"id": marker}))


@pytest.mark.parametrize("uri", [False, True])
def test_the_old_layout_is_moved_into_place_once(tmp_path: Path, uri: bool) -> None:
    home, base = tmp_path / "home", tmp_path / "home" / "checkpoint"
    _spark_checkpoint(base, "dispatcher")
    _spark_checkpoint(tmp_path / "home" / "checkpoint-relay", "relay")
    _spark_checkpoint(tmp_path / "home" / "checkpoint-expander", "expander")
    _spark_checkpoint(home / "checkpoint-ingest", "ingest")
    settings = Settings(home=home, checkpoint=f"file://{base}" if uri else "")
    assert len(adopt_legacy_checkpoints(settings)) == 4
    for query in CheckpointQuery:
        metadata = local_path(settings.checkpoint_for(query))
        assert metadata is not None
        assert json.loads((metadata / "metadata").read_text()) == {"id": query.value}
    assert sorted(p.name for p in home.iterdir()) == ["checkpoint"]
    assert adopt_legacy_checkpoints(settings) == []


def test_a_new_layout_is_left_alone(tmp_path: Path) -> None:
    settings = Settings(home=tmp_path, checkpoint=str(tmp_path / "ck"))
    _spark_checkpoint(tmp_path / "ck" / "dispatcher", "new")
    _spark_checkpoint(tmp_path / "checkpoint-ingest", "old")  # both: the new one wins
    _spark_checkpoint(tmp_path / "ck" / "ingest", "new")
    assert adopt_legacy_checkpoints(settings) == []
    assert (tmp_path / "checkpoint-ingest").exists()


def test_another_file_system_is_left_alone(tmp_path: Path) -> None:
    _spark_checkpoint(tmp_path / "checkpoint-ingest", "old")
    assert adopt_legacy_checkpoints(Settings(home=tmp_path, checkpoint="s3a://b/ck")) == []

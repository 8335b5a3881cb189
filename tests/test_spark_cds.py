"""The Spark driver maps the class archive ``scripts/bootstrap.sh`` writes, when there is one,
and starts as before when there is none."""

from __future__ import annotations

from pathlib import Path

import pytest

from tocsin.spark import cds


def test_no_archive_no_option(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cds, "archive_path", lambda: tmp_path / "spark-4.3.0.jsa")
    assert cds.archive_options() == ""


def test_an_archive_is_mapped_quietly_unless_turned_off(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    archive = tmp_path / "spark-4.3.0.jsa"
    archive.write_bytes(b"\0")
    monkeypatch.setattr(cds, "archive_path", lambda: archive)
    options = cds.archive_options()
    assert f"-XX:SharedArchiveFile={archive}" in options
    assert "-Xshare:auto" in options and "-Xlog:cds=off" in options  # a mismatch: no warning
    assert cds.IN_PLACE in options  # mapped where it was written for, not relocated
    monkeypatch.setenv("TOCSIN_SPARK_CDS", "0")
    assert cds.archive_options() == ""


def test_the_archive_is_named_after_pyspark_in_this_environment() -> None:
    path = cds.archive_path()
    assert path.name.startswith("spark-") and path.suffix == ".jsa"
    assert "share" in path.parts


def test_this_jvm_takes_the_in_place_mapping() -> None:
    """The JVM starts with the option, and maps its own archive at the address it was written
    for (a relocated archive is resident and private in every process)."""
    import subprocess

    out = subprocess.run(["java", *cds.IN_PLACE.split(), "-Xlog:cds=info", "-version"],
                         capture_output=True, text=True, check=True).stdout
    assert "always map archive(s) at an alternative address" not in out

"""Spark's Python workers import PySpark from its installed package, not from Spark's zips."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tocsin.spark.daemon import prefer_installed_pyspark

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def _spark_zips(home: Path) -> list[str]:
    lib = home / "python" / "lib"
    return [str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip")]


def test_the_zips_go_when_the_package_is_installed(tmp_path: Path) -> None:
    zips = _spark_zips(tmp_path)
    path = [*zips, str(tmp_path / "app"), *sys.path]
    assert prefer_installed_pyspark(path) == [str(tmp_path / "app"), *sys.path]
    assert prefer_installed_pyspark(sys.path) is sys.path  # no zip: nothing to do


def test_the_zips_stay_where_they_are_all_there_is(tmp_path: Path) -> None:
    """An executor holding PySpark only as Spark's zips keeps them."""
    zips = _spark_zips(tmp_path)
    bare = [*zips, str(tmp_path / "empty")]
    assert prefer_installed_pyspark(bare) == bare


@pytest.mark.spark
def test_workers_import_the_installed_pyspark(spark: SparkSession) -> None:
    def origin(_: object) -> str:
        import pyspark

        return str(pyspark.__file__)

    files = spark.sparkContext.parallelize(range(2), 2).map(origin).collect()
    assert files, "no worker answered"
    assert all(".zip" not in f and f.endswith("pyspark/__init__.py") for f in files), files

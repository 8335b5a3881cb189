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


def test_every_python_process_of_a_session_reads_the_installed_pyspark(tmp_path: Path) -> None:
    """The planners and the query processes Spark starts (not its task workers, which the
    daemon serves) have the session's ``sitecustomize`` drop Spark's zips and jar, and still
    run a ``sitecustomize`` further down the path."""
    import os
    import subprocess

    import pyspark

    from tocsin.spark.session import SITE

    home = Path(pyspark.__file__).parent
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['OTHER_SITE'] = 'ran'\n")
    jar = str(home / "jars" / "spark-core_2.13-4.3.0.jar")
    path = os.pathsep.join([*_spark_zips(home), jar, str(SITE), str(other)])
    probe = ("import os, sys, pyspark; print(pyspark.__file__); print(os.environ['OTHER_SITE']);"
             " print(any(p.endswith(('.zip', '.jar')) and 'spark' in p for p in sys.path))")
    out = subprocess.run([sys.executable, "-c", probe], env={**os.environ, "PYTHONPATH": path},
                         capture_output=True, text=True, check=True)
    origin, chained, spark_paths = out.stdout.split()
    assert origin == pyspark.__file__ and ".zip" not in origin
    assert (chained, spark_paths) == ("ran", "False")
    assert not out.stderr

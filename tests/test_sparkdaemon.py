"""Spark's Python workers import PySpark from its installed package, not from Spark's zips,
and fork from a daemon that imported what they need."""

from __future__ import annotations

import subprocess
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


def test_the_preload_imports_everything_and_starts_no_thread() -> None:
    """The daemon forks after the preload: every module imports, and no thread is left
    running that a fork would copy without its owner."""
    probe = """
import threading
from tocsin.spark.daemon import preload
assert preload() == [], preload()
assert threading.enumerate() == [threading.main_thread()], threading.enumerate()
"""
    subprocess.run([sys.executable, "-c", probe], check=True)


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


def _site() -> dict[str, object]:
    """The session's ``sitecustomize``, loaded as a module of its own."""
    import runpy

    from tocsin.spark.session import SITE

    return runpy.run_path(str(SITE / "sitecustomize.py"), run_name="tocsin_site_probe")


def test_only_a_planners_daemon_exits_when_idle() -> None:
    planner = _site()["planner_daemon"]
    assert callable(planner)
    py = "/usr/bin/python3"
    assert planner([py, "-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"])
    assert not planner([py, "-m", "pyspark.daemon", "pyspark.worker"])
    assert not planner([py, "-m", "pyspark.daemon"])
    assert not planner([py, "-m", "tocsin.spark.daemon", "pyspark.worker"])
    assert not planner([py, "-m", "pyspark.sql.streaming.python_streaming_source_runner"])
    assert not planner([py, "-c", "pass"])


def test_a_planners_daemon_stays_while_it_has_a_worker_and_goes_once_idle() -> None:
    import socket

    now = [0.0]
    alive: list[bool | None] = [True]
    idle_exit = _site()["IdleExit"]
    assert callable(idle_exit)
    poller = idle_exit(10.0, children=lambda pid: alive[0], clock=lambda: now[0])
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    poller.register(listener.fileno())
    try:
        now[0] = 30.0
        assert poller.poll(0) == []  # a worker lives
        alive[0] = None
        now[0] = 60.0
        assert poller.poll(0) == []  # the kernel does not say: stay
        alive[0] = False
        now[0] = 65.0
        assert poller.poll(0) == []  # idle for 5 s only
        with socket.create_connection(listener.getsockname()):
            now[0] = 80.0
            assert poller.poll(0) != []  # a connection waits: answered, never dropped
            listener.accept()[0].close()
        with pytest.raises(SystemExit):
            poller.poll(1000)
    finally:
        listener.close()


def test_a_planners_daemon_really_exits_after_it_idled(tmp_path: Path) -> None:
    """PySpark's daemon for a planner, started as Spark starts it, with no worker ever asked
    for: it writes its port, then exits on its own once idle."""
    import os
    import subprocess
    import time

    from tocsin.spark.session import SITE

    env = {**os.environ, "PYTHONPATH": str(SITE), "PYTHON_WORKER_FACTORY_SECRET": "s"}
    proc = subprocess.Popen([sys.executable, "-m", "pyspark.daemon",
                             "pyspark.sql.worker.create_data_source"], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL)
    try:
        assert proc.stdout is not None and len(proc.stdout.read(4)) == 4  # its port
        started = time.monotonic()
        proc.wait(timeout=30)
        idled = time.monotonic() - started
        print(f"a planner's idle daemon exited after {idled:.1f} s")
        assert idled >= 5  # not at once: it waited to be idle
    finally:
        if proc.poll() is None:
            proc.kill()

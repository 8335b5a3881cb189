"""Memory given back when a local Spark session comes to rest: :class:`AtRest`.

After a burst, ``tocsin up`` held about 1.1 GB where a fresh one holds 650-710 MB: the Python
workers Spark forked for the burst (each 85-130 MB resident, most of it the pages it shares
with its daemon, counted again in each) wait in Spark's idle pools, which Spark empties only
after a minute with no task of their kind, checked every 10 s (``PythonWorkerFactory``: a
hard-coded minute), and the JVM's heap keeps the size the burst gave it until a full
collection. Once the session has run no job for :data:`REST_S`, :class:`AtRest` marks every
pool idle for that minute, so that Spark's own monitor stops its idle workers at its next
check, under the pool's lock, exactly as it does after a minute (a worker taken by a task
meanwhile is no longer idle and is left alone); and it asks the JVM for one full collection,
after which the serial collector gives the heap's free part back
(``-XX:MaxHeapFreeRatio``). Then it waits for the next job before doing it again.

Local sessions only (``local[...]``): the pools are those of the driver's JVM, which runs the
tasks. On a cluster the executors' pools are theirs to manage. Spark's pools are private
fields, reached by reflection; a Spark where they are not found is left as it is (logged
once).
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark import SparkContext

__all__ = ["CHECK_S", "REST_S", "AtRest", "retire_idle_workers"]

log = logging.getLogger("tocsin.spark.rest")

REST_S = 20.0
"""Seconds without a Spark job after which a session is at rest: longer than the gaps between
the micro-batches of a trickle (a trigger a second), well inside the minute Spark waits."""
CHECK_S = 5.0
"""How often the session's jobs are looked at: one call to the JVM (under a millisecond)."""
_IDLE_NS = 60_000_000_000
"""Spark's idle timeout of a worker pool (``PythonWorkerFactory.IDLE_WORKER_TIMEOUT_NS``)."""
_LAST_ACTIVITY = "org$apache$spark$api$python$PythonWorkerFactory$$lastActivityNs"


def _field(jvm: Any, owner: str, name: str) -> Any:
    """Field ``name`` of class ``owner``, private or not, made accessible. Through
    ``java.lang.Class`` alone: py4j looks a method up by every public method of the object's
    class, and one of ``SparkEnv``'s names a class not on the driver's class path, an error
    that drops py4j's connection."""
    field = jvm.java.lang.Class.forName(owner).getDeclaredField(name)
    field.setAccessible(True)
    return field


def retire_idle_workers(sc: SparkContext) -> int:
    """Mark every Python worker pool of this JVM as idle for Spark's minute, so that its
    monitor stops the pool's idle workers at its next check (within 10 s); the pools so
    marked."""
    jvm, jsc = sc._jvm, sc._jsc
    if jvm is None or jsc is None:
        return 0
    env = jsc.sc().env()
    pools = _field(jvm, "org.apache.spark.SparkEnv", "pythonWorkers").get(env)
    last_activity = _field(jvm, "org.apache.spark.api.python.PythonWorkerFactory",
                           _LAST_ACTIVITY)
    idle_since = jvm.java.lang.System.nanoTime() - _IDLE_NS - 1
    marked = 0
    values = pools.values().iterator()
    while values.hasNext():
        last_activity.setLong(values.next(), idle_since)
        marked += 1
    return marked


class AtRest:
    """A daemon thread of the driver that gives memory back once the session has run no job
    for :data:`REST_S` (see the module's docstring); :meth:`stop` ends it."""

    def __init__(self, sc: SparkContext, *, rest_s: float = REST_S,
                 check_s: float = CHECK_S) -> None:
        self._sc, self._rest_s, self._check_s = sc, rest_s, check_s
        self._stop = threading.Event()
        self.rests = 0
        """How many times the session came to rest (and memory was given back)."""
        self._thread = threading.Thread(target=self._loop, name="tocsin-at-rest", daemon=True)

    def start(self) -> AtRest:
        """Start watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()

    def _jobs(self) -> tuple[int, bool]:
        """How many jobs the session has started, and whether one is running."""
        jsc = self._sc._jsc
        if jsc is None:
            raise RuntimeError("the session stopped")
        started = int(jsc.sc().dagScheduler().numTotalJobs())
        return started, bool(self._sc.statusTracker().getActiveJobsIds())

    def _loop(self) -> None:
        busy_at, rested, seen = time.monotonic(), True, -1  # fresh: nothing to give back
        while not self._stop.wait(self._check_s):
            try:
                started, active = self._jobs()
            except Exception:  # the session stopped, the JVM is going away
                return
            now = time.monotonic()
            if active or started != seen:
                if seen >= 0:
                    rested = False
                busy_at, seen = now, started
            elif not rested and now - busy_at >= self._rest_s:
                rested = True
                self._give_back()

    def _give_back(self) -> None:
        try:
            retire_idle_workers(self._sc)
        except Exception as exc:  # a Spark whose pools look otherwise: keep its own minute
            if not self.rests:
                log.warning("idle Python workers are left to Spark's own timeout",
                            extra={"reason": repr(exc)})
        try:
            jvm = self._sc._jvm
            assert jvm is not None
            jvm.java.lang.System.gc()
        except Exception:
            return
        self.rests += 1
        log.info("spark session at rest: idle Python workers retired, heap collected",
                 extra={"rests": self.rests})

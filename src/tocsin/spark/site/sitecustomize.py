"""Run by Python at the start of every Python process a Tocsin Spark session starts (this
directory is on their ``PYTHONPATH``: :func:`tocsin.spark.session.spark_session`): it drops
Spark's own ``pyspark.zip``, ``py4j-*.zip`` and Spark's jar from the front of ``sys.path``
when the same interpreter finds ``pyspark`` and ``py4j`` installed without them.

Spark puts its zips first on the path of every Python process it starts, and a module imported
from a zip is compiled anew in every process (a zip holds no compiled code): the planners of a
query's data sources, its source and commit processes, each a daemon and a fork, spent 0.5-0.7 s
of CPU each compiling PySpark, one after another before the first batch. Installed, PySpark is
read compiled. (:mod:`tocsin.spark.daemon` does the same for the task workers on executors that
lack this directory.)

A planner's daemon (``python -m pyspark.daemon pyspark.sql.worker.<planner>``: Spark starts one
for each kind of planning a Python data source needs, five for the dispatcher, and keeps each
for the session's life) exits once it has had no worker for :data:`PLANNER_IDLE_S`
(:class:`IdleExit`): most plan only when a query starts, and at rest the five held 180 MB.
Spark starts a daemon again when it next needs one (it finds the port closed, a path it logs
as a warning, below Tocsin's default ``spark_log_level``).

Only the standard library is used here: importing ``tocsin`` would load its settings in every
process. Another ``sitecustomize`` further down the path still runs, after this one.
"""

from __future__ import annotations

import os
import select
import sys
from importlib.machinery import PathFinder
from typing import Any

_SPARK_PATHS = ("pyspark.zip", "py4j-")
_POLL = select.poll
PLANNER_IDLE_S = 10.0
"""A planner's daemon with no worker for this long exits. Spark closes a worker idle for a
minute (hard-coded), so a daemon goes about 70 s after its last planning."""


def _spark_entry(path: str) -> bool:
    name = os.path.basename(path)
    return ((path.endswith(".zip") and name.startswith(_SPARK_PATHS))
            or (path.endswith(".jar") and name.startswith("spark-core")))


def prefer_installed_pyspark(path: list[str]) -> list[str]:
    """``path`` without Spark's zips and jar when ``pyspark`` and ``py4j`` are found without
    them; else ``path`` as it is."""
    rest = [p for p in path if not _spark_entry(p)]
    if len(rest) == len(path):
        return path
    if any(PathFinder.find_spec(name, rest) is None for name in ("pyspark", "py4j")):
        return path
    return rest


def planner_daemon(argv: list[str]) -> bool:
    """Whether ``argv`` (``sys.orig_argv``) runs PySpark's daemon for a planner, not for the
    task workers (``pyspark.worker``, or Tocsin's own daemon module)."""
    try:
        i = argv.index("-m")
    except ValueError:
        return False
    return argv[i + 1:i + 2] == ["pyspark.daemon"] and argv[i + 2:i + 3] not in ([], [
        "pyspark.worker"])


def has_children(pid: int) -> bool | None:
    """Whether process ``pid`` has a child (None: the kernel does not say)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", encoding="ascii") as f:
            return bool(f.read().strip())
    except OSError:
        return None


class IdleExit:
    """Stands in for ``select.poll`` in a planner's daemon: the daemon's loop polls its socket
    each second, and when nothing is ready, no worker is alive and none has been for
    ``idle_s``, the poll raises ``SystemExit`` instead — between two turns of the loop, never
    with a connection accepted and not yet answered. ``children`` and ``clock`` are for tests.
    """

    def __init__(self, idle_s: float = PLANNER_IDLE_S, *, children: Any = has_children,
                 clock: Any = None) -> None:
        import time

        self._poll = _POLL()
        self._pid = os.getpid()
        self._idle_s = idle_s
        self._children = children
        self._clock = clock or time.monotonic
        self._busy = self._clock()

    def register(self, *args: Any) -> None:
        self._poll.register(*args)

    def unregister(self, *args: Any) -> None:
        self._poll.unregister(*args)

    def modify(self, *args: Any) -> None:
        self._poll.modify(*args)

    def poll(self, timeout: Any = None) -> list[tuple[int, int]]:
        if os.getpid() == self._pid:  # the daemon itself, not a worker it forked
            ready = self._poll.poll(0)
            if ready:
                return ready
            now, alive = self._clock(), self._children(self._pid)
            if alive is not False:  # a worker, or no way to tell: stay
                self._busy = now
            elif now - self._busy >= self._idle_s:
                raise SystemExit(0)
        return self._poll.poll(timeout)


def _exit_planner_daemon_when_idle() -> None:
    select.poll = IdleExit  # type: ignore[assignment,misc]


def _chain() -> None:
    """Run the next ``sitecustomize`` on the path, if any, as Python would have without us."""
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    this = sys.modules.pop(__name__)
    try:
        import sitecustomize  # noqa: F401
    except ImportError:
        pass
    finally:
        sys.modules[__name__] = this  # the import machinery looks it up once we return


sys.path[:] = prefer_installed_pyspark(sys.path)
if planner_daemon(list(getattr(sys, "orig_argv", []))):
    _exit_planner_daemon_when_idle()
_chain()

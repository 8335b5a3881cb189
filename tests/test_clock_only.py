"""Time comes from the clock: no module but ``tocsin.clock`` reads the wall clock itself, so
every rule that depends on "now" can be driven by a :class:`~tocsin.clock.ManualClock`."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).parents[1] / "src" / "tocsin"
WALL_CLOCK = re.compile(r"time\.time(_ns)?\(|datetime\.(now|utcnow|today)\(|date\.today\(")


def test_only_the_clock_reads_the_wall_clock() -> None:
    readers = [f"{path.relative_to(SRC)}:{n}" for path in sorted(SRC.rglob("*.py"))
               if path.name != "clock.py" or path.parent != SRC
               for n, line in enumerate(path.read_text().splitlines(), 1)
               if WALL_CLOCK.search(line)]
    assert readers == []
    assert WALL_CLOCK.search((SRC / "clock.py").read_text())  # the pattern does match


SLEEPS = re.compile(r"time\.(sleep|monotonic|perf_counter)\(")
CORE = ["domain", "dispatcher/core.py", "dispatcher/deliver.py", "dispatcher/breaker.py",
        "dispatcher/expansion.py", "dispatcher/handover.py", "dispatcher/local.py"]


def test_the_core_and_the_domain_wait_and_measure_on_the_clock() -> None:
    """The Spark-free core and the domain sleep through the clock and read no monotonic time,
    so a manual-clock test of them never really waits."""
    paths = [p for part in CORE for p in (sorted((SRC / part).rglob("*.py"))
                                          if (SRC / part).is_dir() else [SRC / part])]
    assert len(paths) > len(CORE)
    waiters = [f"{path.relative_to(SRC)}:{n}" for path in paths
               for n, line in enumerate(path.read_text().splitlines(), 1)
               if SLEEPS.search(line)]
    assert waiters == []


def test_a_store_that_fails_is_retried_in_manual_time() -> None:
    import time as real

    from tocsin.clock import ManualClock
    from tocsin.errors import StoreError
    from tocsin.stores.retry import retrying

    clock, calls = ManualClock(0), []

    def work() -> str:
        calls.append(clock.now_ms())
        if len(calls) < 5:
            raise StoreError("down")
        return "up"

    started = real.monotonic()
    assert retrying(work, what="test", clock=clock) == "up"
    assert calls == [0, 100, 300, 700, 1500]  # 0.1 s doubling, in the clock's time
    assert real.monotonic() - started < 1

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

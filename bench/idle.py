"""What an idle ``tocsin up`` costs, by setting: CPU and resident memory of its whole process
tree (API, Spark driver and JVM, Python workers; the memory without this benchmark's own
process, ~60 MB, which the first figures of 2026-11-26 counted) over ``--seconds`` with nothing
due, after ``--settle`` seconds from ready (70 s by default: Spark stops Python workers idle
for a minute), and how long it took to be ready, for the default settings first and then each
variant of the settings that shape idle work (keep-warm batches, the relay, hand-over
windows).

    bench/run idle [--seconds 60] [--settle 70] [--variants default,keep-warm,no-relay]

Writes bench/results/idle.json (per variant: ``cpu_pct_of_one_core``, ``rss_mb``, ``pss_mb``,
``ready_s``).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.common import machine_info, measure_idle, run_stamp
from bench.tocsin_up import TocsinUp

RESULTS = Path(__file__).parent / "results" / "idle.json"
VARIANTS: dict[str, dict[str, str]] = {
    "default": {},
    "keep-warm": {"TOCSIN_KEEP_WARM_SECONDS": "30"},
    "no-relay": {"TOCSIN_RELAY": "false"},
    "no-windows": {"TOCSIN_HAND_OVER_SECONDS": "0"},
}


def log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(name: str, env: dict[str, str], seconds: float, settle: float) -> dict[str, Any]:
    import time

    home = Path(tempfile.mkdtemp(prefix=f"tocsin-bench-idle-{name}-"))
    up = TocsinUp(home, store_url=None, env={"TOCSIN_ARCHIVE_EVERY_SECONDS": "0", **env},
                  log=log)
    try:
        ready_s = up.start()
        time.sleep(settle)
        assert up.proc is not None
        idle = measure_idle(seconds, root=up.proc.pid)  # tocsin up's tree, not this process
    finally:
        up.stop()
    idle["ready_s"] = round(ready_s, 1)
    log(f"{name}: {idle['cpu_pct_of_one_core']} % of one core ({idle['cpu_s_by_kind']}), "
        f"RSS {idle['rss_mb']} MB (PSS {idle['pss_mb']} MB), ready in {idle['ready_s']} s")
    return idle


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--settle", type=float, default=70.0)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    out: dict[str, Any] = {"benchmark": "idle", "seconds": args.seconds,
                           **run_stamp()}
    for name in args.variants.split(","):
        out[name] = run(name, VARIANTS[name], args.seconds, args.settle)
    out["machine"] = machine_info()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    print(json.dumps({n: {k: out[n][k] for k in ("cpu_pct_of_one_core", "rss_mb", "pss_mb",
                                                  "ready_s")}
                      for n in args.variants.split(",")}))


if __name__ == "__main__":
    main()

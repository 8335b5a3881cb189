"""A progress bar for a Spark batch job, for a person at a terminal: rows done, rows a second,
rejects, the time left, and the job's tasks done out of all (from Spark's status tracker).
Counts arrive as each Spark task ends; the time left is the time so far scaled by the tasks
still to do."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any

__all__ = ["Progress"]


class Progress:
    """Shows ``values`` (name → a function reading the count) for the jobs of ``group``;
    does nothing when not ``enabled``."""

    def __init__(self, sc: Any, group: str, values: Mapping[str, Callable[[], int]], *,
                 enabled: bool) -> None:
        self._sc = sc
        self._group = group
        self._values = values
        self._enabled = enabled
        self._started = time.monotonic()
        self._bar: Any = None
        self._task: Any = None
        self._finished = False

    def __enter__(self) -> Progress:
        if self._enabled:
            from rich.progress import BarColumn, TextColumn, TimeElapsedColumn
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     TextColumn("tasks {task.fields[tasks]}"),
                                     TimeElapsedColumn(), transient=False)
            self._bar.start()
            self._task = self._bar.add_task("starting", total=None, tasks="-")
        return self

    def update(self) -> None:
        """Read the counts and the tasks and redraw."""
        if self._bar is None:
            return
        counts = {name: read() for name, read in self._values.items()}
        rows = sum(counts.values())
        rate = rows / max(time.monotonic() - self._started, 1e-3)
        done, total = self._tasks()
        if self._finished:  # Spark's tracker hears of the last tasks a moment after the job
            done = total
        rejected = counts.get("rejected", 0)
        self._bar.update(self._task, completed=done, total=total or None, tasks=f"{done}/{total}",
                         description=f"{rows:,} rows  {rate:,.0f} rows/s  "
                                     f"{rejected:,} rejected  {self.left(done, total)}")

    def finish(self) -> None:
        """The job has succeeded: every task is done, whatever the tracker has heard yet."""
        self._finished = True
        self.update()

    def left(self, done: int, total: int) -> str:
        """The time left, guessed from the tasks done so far: ``about 0:00:42 left``."""
        if not done or not total:
            return "time left: -"
        seconds = round((time.monotonic() - self._started) * (total - done) / done)
        return f"about {seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d} left"

    def _tasks(self) -> tuple[int, int]:
        tracker = self._sc.statusTracker()
        done = total = 0
        for job_id in tracker.getJobIdsForGroup(self._group):
            job = tracker.getJobInfo(job_id)
            for stage_id in job.stageIds if job else ():
                stage = tracker.getStageInfo(stage_id)
                if stage is not None:
                    done += stage.numCompletedTasks
                    total += stage.numTasks
        return done, total

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if self._bar is not None:
            self.update()
            self._bar.stop()

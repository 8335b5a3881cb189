"""Who runs the delivery engine's jobs: its own fixed threads in a dispatcher process
(:class:`ThreadedWorkers`), or the caller, one job at a time, in the deterministic harness
(:class:`SteppedWorkers`). The engine (:mod:`tocsin.dispatcher.engine`) and its jobs are the
same in both; only who runs them differs::

    ThreadedWorkers:  tocsin-engine   the loop: every decision (one thread)
                      tocsin-send-N   sends of channels whose clients block (send_threads)
                      tocsin-backlog-N the same for destinations with a backlog (niced)
                      tocsin-writer   every acknowledgement, hold and hand-back (one thread)
                      tocsin-puller   every backlog's next rows (one thread, niced)

    SteppedWorkers:   the caller's thread: step the loop, run one job, step again, until
                      nothing is left to run (time moves only when the clock is moved)
"""

from __future__ import annotations

import concurrent.futures
import logging
import os
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING

from tocsin.dispatcher.knobs import BACKLOG_NICE, CLOSE_GRACE_MS

if TYPE_CHECKING:
    from tocsin.dispatcher.engine import Engine

__all__ = ["SteppedWorkers", "ThreadedWorkers", "Workers", "renice"]

Job = Callable[[], None]
log = logging.getLogger("tocsin.dispatcher.engine")


def renice(by: int) -> bool:
    """Lower the calling thread's priority by ``by`` nice levels from where it is (Linux: a
    thread's own; at most 19), so a dispatcher started under ``nice`` keeps the difference;
    whether it could."""
    try:
        me = threading.get_native_id()
        os.setpriority(os.PRIO_PROCESS, me, min(19, os.getpriority(os.PRIO_PROCESS, me) + by))
    except (OSError, AttributeError):  # raising it again takes a privilege
        return False
    return True


class Workers(ABC):
    """Runs an :class:`~tocsin.dispatcher.engine.Engine`'s loop and jobs."""

    detach_async: bool = True
    """A send job that hands an asynchronous channel's send to the channel loop returns at
    once (False: it waits for the answer, so a step ends with it)."""

    @abstractmethod
    def start(self, engine: Engine) -> None:
        """Begin serving ``engine``."""

    @abstractmethod
    def send(self, job: Job, *, backlog: bool) -> None:
        """Run a send job (``backlog``: of a destination pulling its backlog)."""

    @abstractmethod
    def write(self) -> None:
        """The store-writer has work: run :meth:`Engine.write_round` (one round)."""

    @abstractmethod
    def pull(self, *, backlog: bool) -> None:
        """A puller has work (``backlog``: the one for destinations that are behind): run
        :meth:`Engine.pull_round` (one round)."""

    @abstractmethod
    def kick(self) -> None:
        """The engine's inbox has a message."""

    @abstractmethod
    def pause_until(self, ms: int) -> None:
        """Wait until the engine's clock reads ``ms``, or a chunk finishes."""

    @abstractmethod
    def stop(self) -> None:
        """Join every thread (the engine has stopped: its loop said so)."""


class SteppedWorkers(Workers):
    """Jobs run in the caller's thread when the engine is kicked: the loop steps, one job
    runs, the loop steps again, until no job is left. Deterministic on a manual clock."""

    detach_async = False

    def __init__(self) -> None:
        self._engine: Engine | None = None
        self._jobs: deque[Job] = deque()
        self._writing = self._pulling = self._running = False

    def start(self, engine: Engine) -> None:
        self._engine = engine

    def send(self, job: Job, *, backlog: bool) -> None:
        self._jobs.append(job)

    def write(self) -> None:
        if not self._writing:
            self._writing = True
            self._jobs.append(self._write)

    def _write(self) -> None:
        assert self._engine is not None
        self._writing = False
        while self._engine.write_round():
            pass

    def pull(self, *, backlog: bool) -> None:
        if not self._pulling:
            self._pulling = True
            self._jobs.append(self._pull)

    def _pull(self) -> None:
        assert self._engine is not None
        self._pulling = False
        while self._engine.pull_round(backlog=False) or self._engine.pull_round(backlog=True):
            pass  # what is on time first

    def kick(self) -> None:
        """Step the engine and run its jobs until none is left (not re-entered by a job)."""
        engine = self._engine
        if engine is None or self._running:
            return
        self._running = True
        try:
            while True:
                engine.step()
                if not self._jobs:
                    return
                self._jobs.popleft()()
        finally:
            self._running = False

    def pause_until(self, ms: int) -> None:
        assert self._engine is not None
        self._engine.clock.sleep_until(ms)
        self.kick()

    def stop(self) -> None:
        self.kick()


class ThreadedWorkers(Workers):
    """A fixed set of threads, however many destinations: the loop, ``send_threads`` send
    threads (and a quarter as many, niced, for backlogs), one store-writer, two pullers (one
    niced, for backlogs)."""

    def __init__(self, *, send_threads: int) -> None:
        self.send_threads = max(1, send_threads)
        self._engine: Engine | None = None
        self._sends: concurrent.futures.ThreadPoolExecutor | None = None
        self._backlog: concurrent.futures.ThreadPoolExecutor | None = None
        self._threads: list[threading.Thread] = []
        self._write_wake = threading.Event()
        self._pull_wake = {False: threading.Event(), True: threading.Event()}
        self._stopped = threading.Event()

    def start(self, engine: Engine) -> None:
        from tocsin.channels.shared import shared_loop

        # A thread takes its creator's nice value: the process's channel loop is started here,
        # at this thread's priority, before any niced thread can be the first to ask for it
        # (then every webhook of the process went at the backlog's priority, and the send
        # threads its callbacks start too).
        shared_loop()
        self._engine = engine
        self._sends = concurrent.futures.ThreadPoolExecutor(
            self.send_threads, thread_name_prefix="tocsin-send")
        self._backlog = concurrent.futures.ThreadPoolExecutor(
            max(1, self.send_threads // 4), thread_name_prefix="tocsin-backlog",
            initializer=renice, initargs=(BACKLOG_NICE,))
        for name, target in (("tocsin-engine", engine.run),
                             ("tocsin-writer", self._write_loop),
                             ("tocsin-puller", partial(self._pull_loop, backlog=False)),
                             ("tocsin-backlog-puller", partial(self._pull_loop, backlog=True))):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def send(self, job: Job, *, backlog: bool) -> None:
        pool = self._backlog if backlog else self._sends
        assert pool is not None
        pool.submit(job)

    def write(self) -> None:
        self._write_wake.set()

    def pull(self, *, backlog: bool) -> None:
        self._pull_wake[backlog].set()

    def kick(self) -> None:
        pass  # the loop waits on the inbox itself

    def _write_loop(self) -> None:
        engine = self._engine
        assert engine is not None
        while True:
            self._write_wake.wait(0.1)
            self._write_wake.clear()
            while engine.write_round():
                pass
            if self._stopped.is_set() and not engine.writer_has_work():
                return

    def _pull_loop(self, *, backlog: bool) -> None:
        engine = self._engine
        assert engine is not None
        wake = self._pull_wake[backlog]
        if backlog:
            renice(BACKLOG_NICE)
        while not self._stopped.is_set():
            wake.wait(0.1)
            wake.clear()
            while engine.pull_round(backlog=backlog):
                pass

    def pause_until(self, ms: int) -> None:
        assert self._engine is not None
        left = ms - self._engine.clock.now_ms()
        if left > 0:
            self._engine.wait(left / 1000)

    def stop(self) -> None:
        """After the loop ended: the writer finishes what is queued, then every thread and
        pool is joined (a send that hangs past the deadline and grace is left behind)."""
        engine = self._engine
        assert engine is not None
        limit = (engine.settings.send_deadline_ms + CLOSE_GRACE_MS) / 1000
        deadline = time.monotonic() + limit
        self._threads[0].join(limit)  # the loop ends once every row is written or handed back
        if self._threads[0].is_alive():
            log.warning("delivery engine: closing with rows still out (left to the lease)")
            engine.finished = True
        self._stopped.set()
        self._write_wake.set()
        for wake in self._pull_wake.values():
            wake.set()
        for thread in self._threads[1:]:
            thread.join(max(0.0, deadline - time.monotonic()))
        for pool in (self._sends, self._backlog):
            if pool is not None:
                pool.shutdown(wait=False, cancel_futures=True)
        for pool in (self._sends, self._backlog):
            if pool is not None:
                for thread in list(getattr(pool, "_threads", ())):
                    thread.join(max(0.0, deadline - time.monotonic()))

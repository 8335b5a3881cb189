"""``tocsin up``: the API in this process and the dispatcher in a supervised child process.

The dispatcher runs as ``python -m tocsin dispatcher`` so that a crash of Spark never takes
the API down; when it exits unexpectedly it is started again after a short pause.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from typing import Any

from tocsin.config import Settings
from tocsin.redact import redact_url

__all__ = ["DispatcherSupervisor", "run_api", "run_up"]


def _die_with_parent() -> None:
    """In the child: ask Linux to SIGTERM it when the parent dies, even by kill -9."""
    with contextlib.suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class DispatcherSupervisor:
    """Keeps one dispatcher child process running until :meth:`stop`."""

    def __init__(self, env: dict[str, str] | None = None, *, restart_pause_s: float = 2.0,
                 run: str | None = None) -> None:
        self._env = {**os.environ, **(env or {})}
        self._run = run  # the first child's run id, registered by the caller
        self._pause = restart_pause_s
        self._proc: subprocess.Popen[bytes] | None = None
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-dispatcher", daemon=True)

    @property
    def pid(self) -> int | None:
        """The current child's process id."""
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        """Start the child and the watcher thread."""
        self._thread.start()

    def _loop(self) -> None:
        from tocsin.dispatcher.runs import RUN_ENV, new_run_id

        while not self._stopping.is_set():
            # each child is a new run, so a crashed child's claims are released at once
            env = {**self._env, RUN_ENV: self._run or new_run_id()}
            self._run = None
            self._proc = subprocess.Popen([sys.executable, "-m", "tocsin", "dispatcher"],
                                          env=env, preexec_fn=_die_with_parent)
            code = self._proc.wait()
            if self._stopping.is_set():
                return
            print(f"tocsin: dispatcher exited with {code}; restarting", file=sys.stderr)
            self._stopping.wait(self._pause)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the child (SIGTERM, then SIGKILL after ``timeout_s``)."""
        self._stopping.set()
        proc = self._proc
        if proc and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def run_api(settings: Settings, *, expect_dispatcher: bool,
            on_shutdown: Callable[[], None] | None = None, **uvicorn_kw: Any) -> None:
    """Serve the HTTP API until interrupted; ``on_shutdown`` runs as the server stops (uvicorn
    re-raises SIGTERM/SIGINT once it has stopped, so a ``finally`` would never run)."""
    import uvicorn

    from tocsin.api.app import create_app
    from tocsin.keyfile import no_admin_hint

    app = create_app(settings, expect_dispatcher=expect_dispatcher)
    if hint := no_admin_hint(app.state.deps.store):
        print(hint, file=sys.stderr, flush=True)
    if on_shutdown is not None:
        app.router.add_event_handler("shutdown", on_shutdown)
    print(f"tocsin: API listening on http://{settings.api_host}:{settings.api_port} "
          f"(OpenAPI at /docs), store {redact_url(settings.store_url)}", flush=True)
    uvicorn.run(app, host=settings.api_host, port=settings.api_port, log_level="warning",
                **uvicorn_kw)


def run_up(settings: Settings) -> None:
    """Store, API and dispatcher on one machine, in one command; on first start it writes the
    local admin key (see :mod:`tocsin.keyfile`)."""
    from tocsin.clock import SystemClock
    from tocsin.dispatcher.runs import new_run_id
    from tocsin.keyfile import ensure_admin_key
    from tocsin.stores import open_store

    run = new_run_id()
    store = open_store(settings.store_url, buckets=settings.buckets)  # create and migrate
    try:
        written = ensure_admin_key(settings, store, now_ms=SystemClock().now_ms())
        # registered before the API answers: /readyz waits for this run's first batch, not
        # trusting the beats of a dispatcher that died just before
        store.beat_run(run, now_ms=SystemClock().now_ms())
    finally:
        store.close()
    if written is not None:
        print(f"tocsin: admin API key written to {written} (mode 0600); the CLI and the "
              "Python client on this machine use it", flush=True)
    supervisor = DispatcherSupervisor(settings.environment(), run=run)
    supervisor.start()
    try:
        run_api(settings, expect_dispatcher=True, on_shutdown=supervisor.stop)
    finally:
        supervisor.stop()

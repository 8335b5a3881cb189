"""``tocsin up``: the API in this process and the dispatcher in a supervised child process.

The dispatcher runs as ``python -m tocsin dispatcher`` so that a crash of Spark never takes
the API down; when it exits unexpectedly it is started again after a short pause.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tocsin.config import Settings
from tocsin.logs import setup_logging
from tocsin.redact import redact_url

if TYPE_CHECKING:
    from tocsin.api.deps import Deps

__all__ = ["DispatcherSupervisor", "PortTakenError", "ReadyLog", "bind_api", "run_api",
           "run_up"]

log = logging.getLogger("tocsin.runner")
JVM_NOISE = (b"WARNING: Using incubator modules",)
"""Lines the JVM itself prints on every start, whatever the log level (Spark 4 loads the
incubating vector module): dropped from the dispatcher child's output."""


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
                                          env=env, preexec_fn=_die_with_parent,
                                          stderr=subprocess.PIPE)
            _forward(self._proc.stderr)
            code = self._proc.wait()
            if self._stopping.is_set():
                return
            log.error("dispatcher exited; restarting", extra={"exit_code": code,
                                                               "pause_s": self._pause})
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


def _forward(stream: Any) -> None:
    """Copy the child's stderr to ours, line by line, without the JVM's start-up noise."""
    for line in iter(stream.readline, b""):
        if not line.startswith(JVM_NOISE):
            sys.stderr.buffer.write(line)
            sys.stderr.flush()


class PortTakenError(RuntimeError):
    """The API's address is taken (another ``tocsin up``, or any other server)."""


def bind_api(settings: Settings) -> socket.socket:
    """The API's listening socket, bound before anything else starts, so that a second
    ``tocsin up`` on a taken port stops at once, saying so, instead of starting a dispatcher
    (and registering a run) for an API that cannot listen."""
    family = socket.AF_INET6 if ":" in settings.api_host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on connections whose
    # socket says so. Without it a response written in two sends (uvicorn's headers, then
    # its body) waited for the client's delayed ACK: 44 ms a request on a kept-alive
    # connection, /healthz included, against 1.5 ms.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((settings.api_host, settings.api_port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise PortTakenError(
                f"{settings.api_host}:{settings.api_port} is taken (another tocsin up?); "
                "stop it or choose another port (--port, TOCSIN_API_PORT)") from exc
        raise
    sock.set_inheritable(False)
    return sock


def _bind_or_exit(settings: Settings) -> socket.socket:
    """:func:`bind_api`, or exit with status 1 and one log line saying why."""
    try:
        return bind_api(settings)
    except PortTakenError as exc:
        log.error("cannot listen: %s", exc)
        raise SystemExit(1) from None


class ReadyLog:
    """Logs one line when ``/readyz`` turns ready (and one when it turns unready again), from
    a thread asking what ``/readyz`` asks: every :data:`FAST_S` until the first ready, then
    every :data:`SLOW_S`."""

    FAST_S = 0.25
    SLOW_S = 5.0

    def __init__(self, deps: Deps, *, started: float) -> None:
        self._deps, self._started = deps, started
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="tocsin-ready-log", daemon=True)

    def start(self) -> ReadyLog:
        """Start watching."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching."""
        self._stop.set()

    def _loop(self) -> None:
        from tocsin.api.health import readiness_problems

        ready, pause = False, self.FAST_S
        while not self._stop.wait(pause):
            try:
                problems = readiness_problems(self._deps)
            except Exception as exc:  # a watcher's failure must not stop the API
                problems = [repr(exc)]
            if not problems and not ready:
                log.info("ready", extra={"after_s": round(time.monotonic() - self._started, 1)})
                pause = self.SLOW_S
            elif problems and ready:
                log.warning("not ready", extra={"problems": problems})
            ready = not problems


def run_api(settings: Settings, *, expect_dispatcher: bool,
            on_shutdown: Callable[[], None] | None = None, sock: socket.socket | None = None,
            started: float | None = None, **uvicorn_kw: Any) -> None:
    """Serve the HTTP API until interrupted, on ``sock`` (default: bound here, see
    :func:`bind_api`); ``on_shutdown`` runs as the server stops (uvicorn re-raises
    SIGTERM/SIGINT once it has stopped, so a ``finally`` would never run). With
    ``expect_dispatcher`` a :class:`ReadyLog` says when ``/readyz`` turns ready (seconds
    counted from ``started``, a ``time.monotonic()``, default now)."""
    import uvicorn

    from tocsin.api.app import create_app
    from tocsin.apikeys.keyfile import no_admin_hint

    started = time.monotonic() if started is None else started
    setup_logging(settings.log_format, settings.spark_log_level)
    sock = sock or _bind_or_exit(settings)
    app = create_app(settings, expect_dispatcher=expect_dispatcher)
    if hint := no_admin_hint(app.state.deps.store):
        log.warning(hint)
    ready_log = ReadyLog(app.state.deps, started=started) if expect_dispatcher else None
    if on_shutdown is not None:
        app.router.add_event_handler("shutdown", on_shutdown)
    host, port = sock.getsockname()[:2]
    url = f"http://{settings.api_host}:{port}"

    def listening() -> None:
        log.info("API listening" + (", waiting for the dispatcher" if ready_log else ""),
                 extra={"url": url, "docs": f"{url}/docs", "ui": f"{url}/ui",
                        "store": redact_url(settings.store_url)})
        if ready_log is not None:
            ready_log.start()

    app.router.add_event_handler("startup", listening)
    if ready_log is not None:
        app.router.add_event_handler("shutdown", ready_log.stop)
    config = uvicorn.Config(app, host=host, port=port, log_level="warning", **uvicorn_kw)
    _quiet_server(config).run(sockets=[sock])


TICK_S = 1.0
"""How often the API server's housekeeping loop wakes: uvicorn's wakes ten times a second
(its ``Date`` header is set once a second, exit looked for every tick), 0.2 % of a core for an
idle API (4 of 2 000 ticks of CPU in 20 s); once a second it is 0.02 %, and a stop waits up to a
second longer."""


def _quiet_server(config: Any) -> Any:
    """A uvicorn server whose housekeeping loop wakes every :data:`TICK_S`."""
    import asyncio

    import uvicorn

    class QuietServer(uvicorn.Server):
        async def main_loop(self) -> None:
            counter = 0  # a multiple of ten: the Date header each tick, as uvicorn each second
            while not await self.on_tick(counter):
                counter = (counter + 10) % 864_000
                await asyncio.sleep(TICK_S)

    return QuietServer(config)


def embedded_defaults(settings: Settings) -> Settings:
    """``settings`` for the embedded single-user mode: unless the operator set
    ``allow_loopback``, webhooks and brokers may reach receivers on this machine too (its one
    user is on this machine and reaches them already). The allowance is this explicit setting,
    printed at start, never inferred from the bind address: an API on loopback behind a TLS
    proxy serves remote users, and its operator turns it off (``TOCSIN_ALLOW_LOOPBACK=false``).
    ``tocsin api``, the server deployment, keeps the strict default (docs/security.md)."""
    if "allow_loopback" in settings.model_fields_set:
        return settings
    return settings.model_copy(update={"allow_loopback": True})


def run_up(settings: Settings) -> None:
    """Store, API and dispatcher on one machine, in one command; on first start it writes the
    local admin key (see :mod:`tocsin.apikeys.keyfile`)."""
    from tocsin.apikeys.keyfile import ensure_admin_key
    from tocsin.clock import SystemClock
    from tocsin.dispatcher.runs import new_run_id
    from tocsin.stores import open_store

    started = time.monotonic()
    settings = embedded_defaults(settings)
    setup_logging(settings.log_format, settings.spark_log_level)
    log.info("starting", extra={"store": redact_url(settings.store_url),
                                "allow_loopback": settings.allow_loopback})
    if settings.allow_loopback:
        log.info("webhooks and brokers may reach this machine's loopback "
                 "(TOCSIN_ALLOW_LOOPBACK=true, the single-user default of tocsin up); set "
                 "TOCSIN_ALLOW_LOOPBACK=false when others reach this API, e.g. through a proxy")
    sock = _bind_or_exit(settings)  # first: a taken port stops us before a run or a dispatcher
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
        log.info("admin API key written (mode 0600); the CLI and the Python client on this "
                 "machine use it", extra={"path": str(written)})
    supervisor = DispatcherSupervisor(settings.environment(), run=run)
    supervisor.start()
    try:
        run_api(settings, expect_dispatcher=True, on_shutdown=supervisor.stop, sock=sock,
                started=started)
    finally:
        supervisor.stop()

"""What the channels of one process share, however many destinations it sends to: one asyncio
loop in one thread (the webhook channel's aiohttp requests all run there, on one connection
pool: :mod:`tocsin.channels.http`) and one bounded pool of threads for the channels whose
clients block (file, Kafka, RabbitMQ: :meth:`tocsin.abc.Channel.send_async` runs their
``send`` there; :mod:`tocsin.blocking`).

A channel whose client is asynchronous (webhook, NATS) is a :class:`LoopChannel`: it writes
one coroutine, ``_send``, and sends on that loop from a coroutine or from any thread.

The loop starts at its first use and stops at :func:`close_shared` (which also shuts the pool)
or when the process exits; a closed one starts again if used again, and a forked child (Spark's
worker daemon forks its workers) starts its own instead of the parent's, whose thread it does
not have.

    threads: tocsin-channels (the loop) · tocsin-blocking-N (at most channel_threads)
             · asyncio_N (the loop's name look-ups: min(32, cores + 4) threads)
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import threading
from abc import abstractmethod
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

from tocsin.abc import Channel
from tocsin.blocking import close_pool
from tocsin.domain import Envelope, Result

__all__ = ["LoopChannel", "LoopThread", "close_shared", "on_close", "shared_loop"]

T = TypeVar("T")
_STOP_S = 5.0
"""How long closing waits for the loop's own clean-up (closing idle connections)."""


class LoopThread:
    """An event loop running in a daemon thread; :meth:`run` blocks the caller until a
    coroutine finishes there."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    @property
    def here(self) -> bool:
        """Whether the caller runs on this loop's thread."""
        return threading.current_thread() is self._thread

    def run(self, coro: Coroutine[Any, Any, T], timeout_s: float | None = None) -> T:
        """Run ``coro`` on the loop and wait for its result (never from the loop's own
        thread, which would wait for itself)."""
        if self.here:
            coro.close()
            raise RuntimeError("LoopThread.run called on its own loop: await it instead")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout_s)

    async def run_async(self, coro: Coroutine[Any, Any, T]) -> T:
        """Await ``coro`` on this loop from a coroutine on any loop."""
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:  # pragma: no cover - only ever awaited
            running = None
        if running is self.loop:
            return await coro
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, self.loop))

    def stop(self) -> None:
        """Stop the loop and its thread."""
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(_STOP_S)
        if not self._thread.is_alive():
            self.loop.close()


_lock = threading.Lock()
_loop: LoopThread | None = None
_closers: list[Callable[[], Awaitable[None]]] = []
"""Run on the loop, in order, before it stops (the HTTP sessions close their connections)."""


def shared_loop() -> LoopThread:
    """This process's channel loop, started at the first call."""
    global _loop
    loop = _loop
    if loop is not None:
        return loop
    with _lock:
        if _loop is None:
            _loop = LoopThread("tocsin-channels")
        return _loop


def on_close(closer: Callable[[], Awaitable[None]]) -> None:
    """Run ``closer()`` on the loop when it is closed (once per registration)."""
    with _lock:
        _closers.append(closer)


def close_shared(*, wait: bool = True) -> None:
    """Close what channels share: run the loop's closers, stop the loop and its thread, and
    shut the blocking pool (``wait``: for the sends it runs). The next use starts anew."""
    global _loop
    with _lock:
        loop, _loop = _loop, None
        closers = list(_closers)
        _closers.clear()
    if loop is not None:
        for closer in closers:
            with contextlib.suppress(Exception):  # closing anyway: a connection that fails
                loop.run(_awaited(closer), timeout_s=_STOP_S)
        loop.stop()
    close_pool(wait=wait)


class LoopChannel(Channel):
    """A channel whose client is asynchronous (``is_async``): its sends run on the process's
    channel loop, awaited there or from any other loop (:meth:`send_async`) or waited for from
    a thread (:meth:`send`). A subclass writes :meth:`_send`, which runs on that loop."""

    is_async = True

    @abstractmethod
    async def _send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        """One result for each of ``envelopes`` (not empty), on the channel loop."""

    async def send_async(self, envelopes: Sequence[Envelope]) -> list[Result]:
        """Send on the process's channel loop (awaited there, or from any other loop)."""
        if not envelopes:
            return []
        return await shared_loop().run_async(self._send(envelopes))

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        """Send on the process's channel loop, waiting for it from this thread."""
        if not envelopes:
            return []
        return shared_loop().run(self._send(envelopes))


async def _awaited(closer: Callable[[], Awaitable[None]]) -> None:
    await closer()


def _forget() -> None:
    """In a forked child: the parent's loop thread is not here."""
    global _loop, _lock
    _loop, _lock = None, threading.Lock()
    _closers.clear()


os.register_at_fork(after_in_child=_forget)
atexit.register(close_shared, wait=False)

"""The process's one bounded pool of threads for blocking calls awaited from an event loop: the
sends of channels whose clients block (file, Kafka, RabbitMQ) when a caller awaits
:meth:`tocsin.abc.Channel.send_async`. At most ``channel_threads`` threads (settings), made as
they are needed, however many destinations; threads ``tocsin-blocking-N``.

It starts at its first use and stops at :func:`close_pool` or when the process exits; a forked
child (Spark's worker daemon forks its workers) starts its own.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import os
import threading

__all__ = ["blocking_pool", "close_pool"]

_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None


def blocking_pool() -> concurrent.futures.ThreadPoolExecutor:
    """This process's pool, started at the first call."""
    global _pool
    pool = _pool
    if pool is not None:
        return pool
    with _lock:
        if _pool is None:
            from tocsin.config import Settings

            _pool = concurrent.futures.ThreadPoolExecutor(
                Settings().channel_threads, thread_name_prefix="tocsin-blocking")
        return _pool


def close_pool(*, wait: bool = True) -> None:
    """Shut the pool (``wait``: for the calls it runs); the next use starts a new one."""
    global _pool
    with _lock:
        pool, _pool = _pool, None
    if pool is not None:
        pool.shutdown(wait=wait)


def _forget() -> None:
    """In a forked child: the parent's pool threads are not here."""
    global _pool, _lock
    _pool, _lock = None, threading.Lock()


os.register_at_fork(after_in_child=_forget)
atexit.register(close_pool, wait=False)

"""Tocsin's test kit, for our own tests, the benchmarks and users' tests alike.

Fakes, for fast tests of logic (no servers, no sleeping):

=========================  ===================================================================
:class:`ManualClock`       time that moves only when told (``advance``, ``set``)
:func:`memory_store`       a SQLite store in memory (one process)
:class:`Recordings`        where recording channels (kind ``recording``) keep what they got;
                           :func:`recorded` / :func:`reset` read and clear the process's own;
                           :func:`use_recording_channels` makes this process accept the kind
                           (the API, ``build_channel``): never a kind of production
:class:`LocalDispatcher`   the dispatcher without Spark, one micro-batch per ``step()``
=========================  ===================================================================

Real parts, for tests of the truth (each in its own module, imported on first use):

=====================================  ========================================================
:class:`~tocsin.testing.receiver.Receiver`      a recording HTTP server (webhook target) with
                                                scripted answers
:class:`~tocsin.testing.api_server.ApiServer`   the HTTP API on a free loopback port, in a
                                                thread; :func:`~.api_server.free_port`
:mod:`tocsin.testing.dispatch`                  ``running_dispatcher`` / ``running_expander``
                                                (the Spark queries for a block), ``wait_until``,
                                                ``read_lines`` (a file channel's output)
:mod:`tocsin.testing.processes`                 ``start_tocsin`` (``python -m tocsin VERB`` in
                                                its own process group), ``kill_tree``
:mod:`tocsin.testing.postgres`                  a throw-away PostgreSQL cluster, a schema per
                                                test
:class:`~tocsin.testing.tansu.Tansu`            a Kafka-protocol broker (tansu) in memory on a
                                                free loopback port; ``read_topic``
=====================================  ========================================================

A deterministic test of a channel's retry rule::

    clock, recordings = ManualClock(), Recordings()
    store = memory_store()
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING,
                                  config={"fail": "retry", "fail_first": 1}))
    local = LocalDispatcher(store, clock=clock, recordings=recordings)
    store.create([NewSchedule(channel="out", payload=b"{}", due_ms=clock.now_ms())],
                 now_ms=clock.now_ms())
    local.step()                                 # attempt 1 fails: a retry is scheduled
    clock.advance(1_000)
    local.step()                                 # attempt 2 is recorded
    assert len(recordings.recorded("out")) == 1
"""

from __future__ import annotations

from tocsin.abc import Store
from tocsin.clock import ManualClock
from tocsin.dispatcher.local import LocalDispatcher, Step
from tocsin.testing.receiver import Behaviour, Received, Receiver
from tocsin.testing.recording import (
    RecordingChannel,
    Recordings,
    recorded,
    reset,
    use_recording_channels,
)

__all__ = [
    "Behaviour",
    "LocalDispatcher",
    "ManualClock",
    "Received",
    "Receiver",
    "RecordingChannel",
    "Recordings",
    "Step",
    "memory_store",
    "recorded",
    "reset",
    "use_recording_channels",
]


def memory_store(*, buckets: int = 16) -> Store:
    """A fresh store in this process's memory (SQLite ``:memory:``), for tests of logic."""
    from tocsin.stores.sqlite import SQLiteStore

    return SQLiteStore(":memory:", buckets=buckets)

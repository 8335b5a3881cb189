"""Start the dispatcher's streaming queries on a Spark session (:mod:`tocsin.spark.session`)."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tocsin.config import Settings
from tocsin.dispatcher.options import DispatchOptions
from tocsin.errors import StoreError
from tocsin.logs import setup_logging
from tocsin.redact import redact_url
from tocsin.spark.session import master_for, register_python_sources, session_for

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from tocsin.abc import Store
    from tocsin.dispatcher.driver_relay import DriverRelay
    from tocsin.dispatcher.runs import RunBeat

__all__ = ["EXPANDER_NAME", "FENCED_EXIT", "QUERY_NAME", "RELAY_NAME", "register_sources",
           "run_dispatcher", "start_dispatcher", "start_expander", "start_relay"]

log = logging.getLogger("tocsin.dispatcher")
QUERY_NAME = "tocsin-dispatcher"
RELAY_NAME = "tocsin-relay"
EXPANDER_NAME = "tocsin-expander"
FENCED_EXIT = 3
"""The exit status of a dispatcher that found itself fenced out."""
LOOK_S = 2.0
"""How often the dispatcher looks whether its queries are still active, beside the listener
that tells it when one stops."""


def register_sources(spark: SparkSession) -> None:
    """Register the dispatcher's data sources (``tocsin``, ``tocsin-relay``,
    ``tocsin-recurring``) with ``spark``."""
    from tocsin.dispatcher.expander import ExpansionDataSource
    from tocsin.dispatcher.source import RelayDataSource, TocsinDataSource

    register_python_sources(spark, TocsinDataSource, RelayDataSource, ExpansionDataSource)


def _start(spark: SparkSession, source: str, options: DispatchOptions, *,
           checkpoint: str | Path, trigger_seconds: float, name: str) -> StreamingQuery:
    """Start the streaming query reading and writing the data source ``source``."""
    register_sources(spark)
    spark_options: dict[str, Any] = options.to_spark()
    return (
        spark.readStream.format(source).options(**spark_options).load()
        .writeStream.format(source).options(**spark_options)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{trigger_seconds} seconds")
        .queryName(name)
        .start()
    )


def start_dispatcher(spark: SparkSession, options: DispatchOptions, *, checkpoint: str | Path,
                     trigger_seconds: float = 1.0, name: str = QUERY_NAME) -> StreamingQuery:
    """Start the streaming query: due schedules → delivery, checkpointed at ``checkpoint``."""
    return _start(spark, "tocsin", options, checkpoint=checkpoint,
                  trigger_seconds=trigger_seconds, name=name)


def start_relay(spark: SparkSession, options: DispatchOptions, *, checkpoint: str | Path,
                trigger_seconds: float = 1.0, name: str = RELAY_NAME) -> StreamingQuery:
    """Start the relay as a Spark query (the test kit's; ``tocsin dispatcher`` runs it in a
    thread of its driver, :mod:`tocsin.dispatcher.driver_relay`): one task over every bucket
    whose hand-over windows are shifted half a window, handing over in the main query's gaps
    between batches (:mod:`tocsin.dispatcher.handover`)."""
    from tocsin.dispatcher.driver_relay import relay_options

    return _start(spark, "tocsin-relay", relay_options(options), checkpoint=checkpoint,
                  trigger_seconds=trigger_seconds, name=name)


def start_expander(spark: SparkSession, options: DispatchOptions, *, checkpoint: str | Path,
                   trigger_seconds: float = 1.0, name: str = EXPANDER_NAME) -> StreamingQuery:
    """Start the recurring expansion query (firings within the horizon → schedules)."""
    return _start(spark, "tocsin-recurring", options, checkpoint=checkpoint,
                  trigger_seconds=trigger_seconds, name=name)


def run_dispatcher(settings: Settings) -> None:
    """Run the dispatcher, the recurring expansion, the relay and, when ``ingest_topic`` is
    set, the Kafka ingestion in this process until one stops or SIGTERM (``tocsin dispatcher``).
    The run joins the store's membership and beats from a thread of this process from the
    start (:mod:`tocsin.dispatcher.runs`); its queries keep their checkpoints under its slot
    (:meth:`~tocsin.config.Settings.checkpoint_for`), so dispatchers started with the same
    settings never share one. On SIGTERM it hands its buckets over first (:func:`_hand_over`)."""
    from dataclasses import replace

    from tocsin.clock import SystemClock
    from tocsin.config import CheckpointQuery, ExpanderMode
    from tocsin.dispatcher.core import DispatchCore
    from tocsin.dispatcher.cover import PeerCover
    from tocsin.dispatcher.driver_expander import DriverExpander
    from tocsin.dispatcher.driver_relay import DriverRelay, relay_options
    from tocsin.dispatcher.expansion import ExpansionCore
    from tocsin.dispatcher.handover import grid_shift_ms
    from tocsin.dispatcher.preflight import undeliverable_channels
    from tocsin.dispatcher.progress import ProgressLog
    from tocsin.dispatcher.runs import RUN_ENV, RunBeat, new_run_id
    from tocsin.dispatcher.workers import ThreadedWorkers
    from tocsin.spark.checkpoints import adopt_legacy_checkpoints
    from tocsin.stores import open_store
    from tocsin.stores.postgres import run_session_name

    began = time.monotonic()
    setup_logging(settings.log_format, settings.spark_log_level)
    log.info("dispatcher starting", extra={"spark_master": settings.spark_master,
                                           "store": redact_url(settings.store_url)})
    run = os.environ.get(RUN_ENV) or new_run_id()
    # Every session of this process and of the Spark processes it starts (they inherit the
    # environment) names the run, so a fence can end them (a frozen process holds locks).
    os.environ["PGAPPNAME"] = run_session_name(run)
    store = open_store(settings.store_url, buckets=settings.buckets)
    for (tenant, name), lacking in undeliverable_channels(store).items():
        # held, not fatal: one tenant's channel must not stop every tenant's deliveries
        log.warning("dispatcher cannot deliver to %s/%s: %s (its schedules are held)",
                    tenant, name, lacking)
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    beat = RunBeat(store, run, clock=SystemClock(), on_fenced=_exit_fenced).start()
    log.info("dispatcher run joined", extra={"run": run, "slot": beat.slot})
    spark = session_for(settings, app_name="tocsin", dispatcher=True,
                        master=master_for(settings.spark_master, settings.partitions))
    log.info("spark session up", extra={"after_s": round(time.monotonic() - began, 1)})
    terminated, warm = threading.Event(), threading.Event()
    spark.streams.addListener(ProgressLog(
        on_terminated=terminated.set,
        on_first_batch=lambda name: warm.set() if name == QUERY_NAME else None))
    options = DispatchOptions.from_settings(settings)
    options = replace(options, run=run, run_beat=1,
                      grid_ms=grid_shift_ms(beat.slot, options.hand_over_ms))
    if beat.slot == 0:  # the layout before 0.2.0 had one dispatcher's checkpoints only
        adopt_legacy_checkpoints(settings)
    queries = [
        start_dispatcher(spark, options,
                         checkpoint=settings.checkpoint_for(CheckpointQuery.DISPATCHER,
                                                            slot=beat.slot),
                         trigger_seconds=settings.trigger_seconds),
    ]
    expander: DriverExpander | None = None
    if settings.recurring_expander is ExpanderMode.SPARK:
        queries.append(start_expander(
            spark, options,
            checkpoint=settings.checkpoint_for(CheckpointQuery.EXPANDER, slot=beat.slot),
            trigger_seconds=settings.trigger_seconds))
    else:
        expander = DriverExpander(ExpansionCore(store, options=options, clock=SystemClock()),
                                  trigger_s=settings.trigger_seconds).start()
    relay: DriverRelay | None = None
    cover: PeerCover | None = None  # covers for a frozen peer (tocsin.dispatcher.cover)
    if settings.ingest_topic:  # the Kafka commands topic (docs/pipelines.md)
        from tocsin.pipelines.ingest import start_ingest

        queries.append(start_ingest(spark, settings, checkpoint=settings.checkpoint_for(
            CheckpointQuery.INGEST, slot=beat.slot)))
    from tocsin.pipelines.archive_timer import start_archive_timer

    stop_archive = threading.Event()
    start_archive_timer(spark, settings, stop_archive)  # daily, unless archive_every_seconds=0
    log.info("dispatcher queries started; warming up", extra={
        "queries": [q.name for q in queries], "after_s": round(time.monotonic() - began, 1)})
    try:
        # The relay starts after the dispatcher's warm-up batch, not beside it: it covers the
        # gaps between batches, and opening the channels competed with the warm-up.
        if (settings.relay and options.hand_over_ms > 0
                and _await_warm(queries, warm, terminated, stopping)):
            relay_opts = relay_options(options)

            def driver_core() -> DispatchCore:
                return DispatchCore(store, options=relay_opts, clock=SystemClock(),
                                    workers=ThreadedWorkers(send_threads=relay_opts.send_threads))

            relay = DriverRelay(driver_core(), trigger_s=settings.trigger_seconds).start()
            cover = PeerCover(store, driver_core, run, lambda: beat.membership,
                              clock=SystemClock()).start()
        _await_any_termination(queries, terminated, stopping)
    finally:
        if cover is not None:
            cover.stop()
        if stopping.is_set():
            log.info("dispatcher stopping: handing its buckets over", extra={"run": run})
            _hand_over(beat, store, relay)
            relay = None
        stop_archive.set()
        if expander is not None:
            expander.stop()
        if relay is not None:
            relay.stop()
        _stop_spark(queries, spark, signalled=stopping.is_set())
        beat.stop()
        signal.signal(signal.SIGTERM, previous)
        log.info("dispatcher stopped", extra={"run": run})


class _GatewayGone(logging.Filter):
    """Drops Py4J's own report of a command the JVM did not answer (``logging.exception`` on
    the root logger, which prints the whole chain of exceptions to stderr): after the JVM had
    the same stop signal, that is the end the stop was after."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.getMessage() != "Exception while sending command."


def _stop_spark(queries: list[StreamingQuery], spark: SparkSession, *,
                signalled: bool) -> None:
    """Stop the queries, then the session. A SIGTERM sent to the process group (a supervisor's
    stop, ``systemctl stop``) reaches Spark's JVM too, which shuts its context down on its own:
    then the stops find it gone, which is the end they were after, not an error (nor a
    traceback of Py4J's: :class:`_GatewayGone`)."""
    if signalled:
        logging.getLogger().addFilter(_GatewayGone())
    try:
        for query in queries:
            query.stop()
        spark.stop()
    except Exception as exc:
        if not signalled:
            raise
        log.info("dispatcher: Spark had stopped already (it had the same signal)",
                 extra={"reason": type(exc).__name__})


def _hand_over(beat: RunBeat, store: Store, relay: DriverRelay | None) -> None:
    """A stop that loses no time: give the buckets up (the other dispatchers take them at their
    next poll, and this run's windows and pulls claim nothing more), hand back what the relay's
    lanes had not sent, and wait (at most :data:`~tocsin.dispatcher.runs.DRAIN_MS`) for the
    lanes to send and acknowledge what they hold; :meth:`RunBeat.stop` then releases the rest."""
    from tocsin.dispatcher.runs import DRAIN_MS

    beat.leave()
    if relay is not None:
        relay.stop()
    deadline = time.monotonic() + DRAIN_MS / 1000
    while time.monotonic() < deadline:
        try:
            if store.run_claims(beat.run) == 0:
                return
        except StoreError as exc:
            log.warning("dispatcher: could not count its claims: %s", exc)
            return
        time.sleep(0.05)


def _exit_fenced() -> None:
    """A run that finds itself fenced out ends its process at once: its buckets and claims are
    someone else's now, and what its lanes still hold must not go out again. Its supervisor
    starts it again, as a new run that joins the membership."""
    log.error("dispatcher exiting: fenced out (it starts again as a new run)")
    logging.shutdown()
    os._exit(FENCED_EXIT)


def _await_warm(queries: list[StreamingQuery], warm: threading.Event,
                terminated: threading.Event, stopping: threading.Event) -> bool:
    """Wait for the dispatcher's first batch; False when a query stopped first (or SIGTERM)."""
    while not warm.wait(0.2):
        if (stopping.is_set() or terminated.is_set()
                or not all(q.isActive for q in queries)):
            return False
    return not stopping.is_set()


def _await_any_termination(queries: list[StreamingQuery], terminated: threading.Event,
                           stopping: threading.Event) -> None:
    """Return when a query stops (raise its exception when it failed) or on SIGTERM. Spark's
    own ``awaitAnyTermination`` waits in a loop that wakes every 10 ms (on a py4j thread of
    the JVM): half a percent of a core of an idle dispatcher, for nothing. Here the listener's
    ``onQueryTerminated`` wakes us, and a look at the queries every :data:`LOOK_S` backs it
    up (each is a round trip to the JVM: five a second were a third of an idle dispatcher
    process's CPU); the stop is seen within 0.2 s."""
    looked = time.monotonic()
    while not terminated.wait(0.2) and not stopping.is_set():
        if time.monotonic() - looked >= LOOK_S:
            looked = time.monotonic()
            if not all(q.isActive for q in queries):
                break
    for query in queries:
        if not query.isActive and (failure := query.exception()) is not None:
            raise failure

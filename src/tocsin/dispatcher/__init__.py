"""The dispatcher: from due schedules to channels, and recurring rules to schedules.

The logic is free of Spark: ``core`` (:class:`~tocsin.dispatcher.core.DispatchCore`: offset,
claim, deliver, verdict, acknowledge, beat), ``deliver`` (send and judge), ``expansion``
(:class:`~tocsin.dispatcher.expansion.ExpansionCore`), ``channel_cache`` (live channels). Two
drivers run it: the Spark Structured Streaming queries (``source`` and ``sink``, ``expander``,
started by ``query``, with ``runtime`` keeping the cores in each worker process over
:mod:`tocsin.spark`'s plumbing), and ``local``
(:class:`~tocsin.dispatcher.local.LocalDispatcher`, one process, stepped by a clock).
Importing this package does not import pyspark; ``query.start_dispatcher`` does.
"""

from __future__ import annotations

__all__: list[str] = []

"""Tocsin's batch and ingest pipelines on Spark, beside the dispatcher's streaming queries.

==================  ==========================================================================
module              what it holds
==================  ==========================================================================
``rows``            source rows (JSON lines, CSV, Parquet) → API items; rejects; derived keys
``loader``          on the executors: check a batch of items, write it in chunks
``writes``          the bulk keyed create (``tocsin.stores.sql.bulk``), lookup by key
``bulk_import``     ``tocsin import PATH``: the Spark batch job, its progress and summary
``commands``        the Kafka commands (create / cancel / reschedule) and applying them
``kafka_source``    a Python streaming data source over confluent-kafka (``assign()``)
``ingest``          ``tocsin ingest``: the streaming query, its rejects and replies
==================  ==========================================================================

Every item is checked by :class:`tocsin.validation.schedule.ScheduleCheck`, the same rules as
``POST /v1/schedules``. Importing this package does not import pyspark or confluent_kafka.
"""

from __future__ import annotations

__all__: list[str] = []

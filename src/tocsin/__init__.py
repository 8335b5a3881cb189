"""Tocsin: a durable scheduler of delayed messages.

"Deliver this payload to this channel at time T": Tocsin stores the request, fires it on time
and delivers it at least once. Its dispatcher is a Spark Structured Streaming query.

Importing ``tocsin`` loads no optional integration (pyspark, confluent-kafka, psycopg...).
"""

from __future__ import annotations

from tocsin.clock import Clock, ManualClock, SystemClock
from tocsin.config import Settings
from tocsin.errors import (
    ConflictError,
    NotFoundError,
    StoreError,
    TocsinError,
    ValidationError,
)

__version__ = "0.2.0"

__all__ = [
    "Clock",
    "ConflictError",
    "ManualClock",
    "NotFoundError",
    "Settings",
    "StoreError",
    "SystemClock",
    "TocsinError",
    "ValidationError",
    "__version__",
]

"""The dispatcher: one Spark Structured Streaming query from due schedules to channels.

``source`` claims due schedules (a Python Data Source stream reader over the store),
``sink`` delivers them on the executors and acknowledges them (a stream writer), ``deliver``
holds the delivery logic they share, and ``query`` builds the Spark session and starts it.
Importing this package does not import pyspark; ``query.start_dispatcher`` does.
"""

from __future__ import annotations

__all__: list[str] = []

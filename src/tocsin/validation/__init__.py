"""Valid input, defined once for every way in: the HTTP API, the bulk import and the Kafka
commands topic. Free of any web framework and of Spark, so that executors import it cheaply.

==============  ==========================================================================
module          what it holds
==============  ==========================================================================
``schedule``    :class:`~tocsin.validation.schedule.ScheduleCheck`: one item → a schedule
                or its problems; a reschedule's change
``batch``       ``POST /v1/schedules``: one item or ``{"schedules": [...]}``, all checked
``models``      the request models (pydantic), each validated into the domain's values
``parsing``     friendly input → canonical forms: instants, durations, payloads, digests
``text``        text the store can hold (no NUL outside payloads, no lone surrogates)
==============  ==========================================================================
"""

from __future__ import annotations

__all__: list[str] = []

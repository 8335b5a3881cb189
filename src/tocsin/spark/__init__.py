"""Spark plumbing shared by the dispatcher's streaming queries and the batch pipelines:
sessions and master sizing (``session``), a Python worker's one piece of process state
(``worker``: its clock and open stores) and the Python worker daemon (``daemon``).

Neither :mod:`tocsin.dispatcher` nor :mod:`tocsin.pipelines` is imported here. Importing this
package does not import pyspark; ``session.spark_session`` does.
"""

from __future__ import annotations

__all__: list[str] = []

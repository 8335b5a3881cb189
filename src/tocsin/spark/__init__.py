"""Spark plumbing shared by the dispatcher's streaming queries and the batch pipelines:
sessions and master sizing (``session``), a Python worker's one piece of process state
(``worker``: its clock and open stores), the Python worker daemon (``daemon``) and the
streaming queries' checkpoints (``checkpoints``: the layout before 0.2.0 moved into place).

Neither :mod:`tocsin.dispatcher` nor :mod:`tocsin.pipelines` is imported here. Importing this
package does not import pyspark; ``session.spark_session`` does.
"""

from __future__ import annotations

__all__: list[str] = []

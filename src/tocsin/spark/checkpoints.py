"""The streaming queries' checkpoints: where they were before 0.2.0, moved once to where
they are now (:meth:`tocsin.config.Settings.checkpoint_for`).

Before 0.2.0 the dispatcher's checkpoint was the ``checkpoint`` folder itself, the relay's and
the expander's were its siblings ``<checkpoint>-relay`` and ``<checkpoint>-expander``, and the
ingest query's was ``home/checkpoint-ingest`` whatever ``checkpoint`` said. Now each is a folder
under ``checkpoint``. A query that found no checkpoint would start afresh: harmless for the
dispatcher's queries (the store decides what is due), not for the ingest query, which would read
its topic again from the start. So the first process of 0.2.0 moves the old folders into place
when the base is on this machine's file system (a plain path or ``file:``); on ``hdfs:`` or
``s3a:`` the old setting never worked (it lost a slash of the URI), so there is nothing to move.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from urllib.parse import unquote, urlsplit

from tocsin.config import CheckpointQuery, Settings

__all__ = ["adopt_legacy_checkpoints", "local_path"]

log = logging.getLogger("tocsin.spark.checkpoints")

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):")
"""A URI's scheme (two letters at least: ``C:`` is a drive, not a scheme)."""
_SPARK_METADATA = "metadata"
"""The file Spark writes first in a query's checkpoint folder."""


def local_path(location: str) -> Path | None:
    """``location`` as a path of this machine's file system, or None for another file system
    (``hdfs:``, ``s3a:`` ...)."""
    scheme = _SCHEME.match(location)
    if scheme is None:
        return Path(location)
    if scheme.group(1).lower() == "file":
        return Path(unquote(urlsplit(location).path))
    return None


def adopt_legacy_checkpoints(settings: Settings) -> list[tuple[Path, Path]]:
    """Move the checkpoints of the layout before 0.2.0 to their folders under the base, once;
    the moves made, as (old, new) pairs. A folder already at its new place is left alone."""
    base = local_path(settings.checkpoint_base)
    if base is None:
        return []
    moves: list[tuple[Path, Path]] = []
    parked = base.with_name(base.name + ".pre-0.2")
    dispatcher = base / CheckpointQuery.DISPATCHER.value
    if (base / _SPARK_METADATA).is_file() and not dispatcher.exists():
        base.rename(parked)  # the old dispatcher checkpoint was the base folder itself
    if parked.is_dir() and not dispatcher.exists():
        base.mkdir(parents=True, exist_ok=True)
        parked.rename(dispatcher)
        moves.append((base, dispatcher))
    siblings = {CheckpointQuery.RELAY: base.with_name(base.name + "-relay"),
                CheckpointQuery.EXPANDER: base.with_name(base.name + "-expander"),
                CheckpointQuery.INGEST: settings.home / "checkpoint-ingest"}
    for query, old in siblings.items():
        new = base / query.value
        if old.is_dir() and not new.exists():
            base.mkdir(parents=True, exist_ok=True)
            old.rename(new)
            moves.append((old, new))
    for old, new in moves:
        log.warning("checkpoint moved to the 0.2.0 layout", extra={"old": str(old),
                                                                   "new": str(new)})
    return moves

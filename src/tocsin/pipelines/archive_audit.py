"""The audit log's share of ``tocsin archive``: entries older than their tenant's retention
(the finished schedules' rules: ``archive_retention_seconds`` and its per-tenant overrides;
an entry that names no tenant takes the default) are written as one Parquet file under
``<archive>/audit/run=<ms>/``, read back and counted, and only then deleted from the store.
The log is small (a row per change of configuration), so the driver does it alone."""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tocsin.abc import Store
from tocsin.domain.audit import AuditEntry

__all__ = ["AUDIT", "archive_audit"]

AUDIT = pa.schema([("id", pa.string()), ("at_ms", pa.int64()), ("key_id", pa.string()),
                   ("key_tenant", pa.string()), ("tenant", pa.string()),
                   ("action", pa.string()), ("target", pa.string()), ("status", pa.int32()),
                   ("client", pa.string()), ("detail", pa.string())])
_PAGE = 5_000


def archive_audit(store: Store, retention: Any, *, now_ms: int, fs: Any, base: str) -> int:
    """Archive and delete the entries past retention (``retention``: the archive's
    :class:`~tocsin.pipelines.archive.Retention`); how many."""
    due: list[AuditEntry] = []
    after: str | None = None
    while page := store.list_audit(until_ms=retention.widest(now_ms), after_id=after,
                                   limit=_PAGE):
        due += [e for e in page if e.at_ms < retention.cutoff(
            e.tenant or "", keyed=False, now_ms=now_ms)]
        after = page[-1].id
        if len(page) < _PAGE:
            break
    if not due:
        return 0
    folder = f"{base}/audit/run={now_ms}"
    fs.create_dir(folder, recursive=True)
    path = f"{folder}/part-0.parquet"
    table = pa.Table.from_pylist([{f: getattr(e, f) for f in AUDIT.names} for e in due],
                                 schema=AUDIT)
    pq.write_table(table, path, filesystem=fs)
    if pq.read_table(path, filesystem=fs).num_rows != len(due):
        raise OSError(f"{path} does not hold the {len(due)} audit entries written")
    store.delete_audit([e.id for e in due])
    return len(due)

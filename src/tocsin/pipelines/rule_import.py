"""``tocsin import --recurring``: recurring rules from JSON lines, each the fields of ``POST
/v1/recurring`` (``cron``, or ``every`` from ``anchor``, ``jitter``, ``count``...).

Rules are few (a tenant holds at most ``tenant_max_recurring``), so no Spark job: the lines are
applied in this process as the commands topic applies its ``recurring`` op
(:class:`~tocsin.pipelines.commands.CommandApplier`), caps and checks included. A rule's id
comes from its file and line, so importing the same file again makes nothing new."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tocsin.clock import SystemClock
from tocsin.config import Settings
from tocsin.domain import DEFAULT_TENANT
from tocsin.errors import ValidationError
from tocsin.pipelines.commands import CommandApplier, Message, Op, Outcome

__all__ = ["MAX_RULE_LINES", "import_rules"]

MAX_RULE_LINES = 100_000
"""The most lines one rule import reads (a file of rules, not of schedules)."""


def _files(path: Path) -> list[Path]:
    if path.is_dir():
        return sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    if not path.is_file():
        raise ValidationError("path", f"{str(path)!r} is no file or folder")
    return [path]


def import_rules(path: str, *, settings: Settings, tenant: str | None) -> dict[str, Any]:
    """Apply every line of ``path`` (a file, or each file of a folder) as a rule of
    ``tenant`` (None: ``default``; a line naming another is invalid on ``tenant``); the
    counts, and each line not applied with its file, line, field and reason."""
    from tocsin.stores import open_store

    root = Path(path)
    files = _files(root)
    applier_settings = settings.model_copy(update={"ingest_tenant": tenant or DEFAULT_TENANT})
    store = open_store(settings.store_url, buckets=settings.buckets)
    counts = dict.fromkeys(Outcome, 0)
    problems: list[dict[str, Any]] = []
    read = 0
    try:
        applier = CommandApplier(store, applier_settings, only=Op.RECURRING)
        for file in files:
            name = file.relative_to(root).as_posix() if file != root else file.name
            with file.open("rb") as lines:
                for number, line in enumerate(lines, start=1):
                    if not line.strip():
                        continue
                    read += 1
                    if read > MAX_RULE_LINES:
                        raise ValidationError("path", f"holds more than {MAX_RULE_LINES} "
                                                      "rules")
                    [answer] = applier.apply([Message(
                        f"import:{name}", 0, number, SystemClock().now_ms(), line.strip())])
                    counts[answer.outcome] += 1
                    if answer.outcome is not Outcome.APPLIED:
                        problems.append({"file": name, "line": number,
                                         "outcome": answer.outcome.value,
                                         "field": answer.field, "reason": answer.reason})
    finally:
        store.close()
    return {"rules": counts[Outcome.APPLIED], "refused": counts[Outcome.REFUSED],
            "invalid": counts[Outcome.INVALID], "problems": problems}

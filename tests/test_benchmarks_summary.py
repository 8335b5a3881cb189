"""The table of today's figures atop docs/benchmarks.md is what ``bench/results/*.json`` give
(``bench/run summary`` writes it; this regenerates it in memory and compares)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from bench import summary


def test_the_table_atop_the_benchmarks_page_is_what_the_results_give() -> None:
    page = summary.PAGE.read_text()
    written = summary.current_block(page)
    assert written is not None, "docs/benchmarks.md has lost its summary markers"
    assert page.index(summary.BEGIN) < page.index("\n## Dispatch"), "the table opens the page"
    assert written == summary.table(summary.load_results()), (
        "docs/benchmarks.md's summary is not what bench/results/*.json give: run "
        "`bench/run summary` and commit both")


def test_every_row_names_its_store_load_date_and_commit() -> None:
    results = summary.load_results()
    for name, doc in results.items():
        assert summary.stamp(doc) != ("?", "?"), f"{name}: run `bench/run summary` to stamp it"
    rows = [row for name, read, _ in summary.SOURCES if name in results
            for row in read(name, results[name])]
    assert {row.area for row in rows} >= {"dispatch", "isolation", "channels", "import",
                                          "ingest", "archive", "recurring", "idle and start"}
    for row in rows:
        assert row.store and row.load and row.value != "—", row


def _copy(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(summary.RESULTS / name, tmp_path / name)
    return tmp_path


def test_a_results_file_not_there_yet_is_named_and_the_rest_shown(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "idle.json", "import.json")
    block = summary.table(summary.load_results(folder))
    assert "idle and start" in block and "[import]" in block and "[dispatch]" not in block
    assert "`bench/run lateness`" in block.split("Not measured yet:", 1)[1]


def test_a_changed_figure_changes_the_table(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "idle.json")
    before = summary.table(summary.load_results(folder))
    doc = json.loads((folder / "idle.json").read_text())
    doc["default"]["rss_mb"] = 123.4
    (folder / "idle.json").write_text(json.dumps(doc))
    after = summary.table(summary.load_results(folder))
    assert before != after and "**123 MB**" in after


def test_new_figures_are_shown_when_the_bench_writes_them(tmp_path: Path) -> None:
    folder = _copy(tmp_path, "idle.json", "import.json")
    idle = json.loads((folder / "idle.json").read_text())
    idle["default"].update(after_burst_rss_mb=790.0, burst=200_000)
    (folder / "idle.json").write_text(json.dumps(idle))
    doc = {k: v for k, v in json.loads((folder / "import.json").read_text()).items()
           if "shuffled" not in k}
    doc.update(sqlite_rows_per_s_csv_shuffled=51_000.0, sqlite_shuffled_ratio_csv=0.91)
    (folder / "import.json").write_text(json.dumps(doc))
    lateness = {"sqlite_p99_ms_1000": 120, "postgres_p99_ms_1000": 240,
                "run_at": "2026-11-28T18:00:00+00:00", "code": {"commit": "abc1234"}}
    (folder / "lateness.json").write_text(json.dumps(lateness))
    block = summary.table(summary.load_results(folder))
    assert "| memory 60 s after a burst (RSS) | **790 MB** |" in block
    assert "**51 000/s** | same rows in due order" in block and f"(0.91{summary.TIMES})" in block
    assert "| **120 ms** | PostgreSQL 240 ms |" in block and "`abc1234`" in block


def test_rewriting_the_table_keeps_the_history_below_it() -> None:
    page = summary.PAGE.read_text()
    block = summary.current_block(page) or ""
    again = summary.with_table(page, f"{summary.BEGIN}\nX\n{summary.END}")
    assert again.split(summary.END, 1)[1] == page.split(summary.END, 1)[1]
    assert again.split(summary.BEGIN, 1)[0] == page.split(summary.BEGIN, 1)[0]
    assert summary.with_table(again, block) == page
    with pytest.raises(ValueError, match="no summary block"):
        summary.with_table("# Benchmarks\n", "X")


def test_stamps_read_a_runs_own_date_and_commit() -> None:
    assert summary.stamp({"run_at": "2026-11-26T20:18:24+00:00",
                          "code": {"commit": "45d15ed"}}) == ("2026-11-26", "45d15ed")
    assert summary.stamp({"date": "2026-11-25T00:13:06+00:00", "commit": "74f53b8"}) == (
        "2026-11-25", "74f53b8")
    assert summary.stamp({}) == ("?", "?")


def test_a_figure_kept_from_an_older_run_shows_that_runs_date_and_commit(
        tmp_path: Path) -> None:
    """``bench/run channels --update`` keeps the figures of targets it did not run; their rows
    had shown the new run's date and commit, and a four-day-old drain passed for today's."""
    folder = _copy(tmp_path, "channels.json")
    doc = json.loads((folder / "channels.json").read_text())
    doc.update(run_at="2026-12-01T10:00:00+00:00", code={"commit": "new0001"},
               file_drain_per_s=40_000.0, webhook_drain_per_s=9_000.0, kept_from={
                   "webhook_drain_per_s": {"run_at": "2026-11-20T08:00:00+00:00",
                                           "command": "bench/run channels", "commit": "old0001"}})
    (folder / "channels.json").write_text(json.dumps(doc))
    rows = {line.split(" | ")[1]: line for line in
            summary.table(summary.load_results(folder)).splitlines() if "[channels]" in line}
    assert "| 2026-11-20 | `old0001` |" in rows["webhook drain"]
    assert "| 2026-12-01 | `new0001` |" in rows["file drain"]

"""``tocsin report``: golden figures on a fixed data set read from the store and the archive;
the HTML page opens in headless Chromium."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tocsin.clock import ManualClock
from tocsin.config import Settings
from tocsin.domain import NewSchedule
from tocsin.pipelines.archive import run_archive
from tocsin.pipelines.report import run_report, time_slices
from tocsin.stores import open_store
from tocsin.stores.sql.base import executemany

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

HOUR = 3_600_000
H = 1_800_000_000_000 // HOUR * HOUR
NOW = H + HOUR // 2
MIN = 60_000


def _history(store: Any) -> None:
    """Two hours of outcomes on (default, out) and one delivery on (t2, out); pending ones."""
    def make(tenant: str = "default", due: int = H) -> str:
        return str(store.create([NewSchedule(channel="out", payload=b"{}", due_ms=due,
                                             tenant=tenant)], now_ms=H - 10 * HOUR)[0][0].id)

    delivered, ended, attempts = [], [], []
    for hour, tenant, lateness in ((H - 2 * HOUR, "default", (100, 200, 300, 400)),
                                   (H - HOUR, "default", (1000, 5000)),
                                   (H - HOUR, "t2", (50,))):
        for late in lateness:
            sid, end = make(tenant), hour + 10 * MIN
            delivered.append((end, sid))
            attempts.append((f"{sid}-1", sid, 1, 1, end - 5, end, "delivered", None, late))
    retried = delivered[0][1]
    attempts.append((f"{retried}-0", retried, 0, 1, H - 2 * HOUR + 5 * MIN,
                     H - 2 * HOUR + 5 * MIN, "retry", "busy", 30))
    dead, cancelled = make(), make()
    ended = [("DEAD", H - HOUR + 20 * MIN, dead), ("CANCELLED", H - HOUR + 25 * MIN, cancelled)]
    attempts.append((f"{dead}-1", dead, 1, 1, H - HOUR + 20 * MIN, H - HOUR + 20 * MIN,
                     "rejected", "no", 9999))
    make(due=NOW - 5 * MIN)  # overdue: counts in the current hour
    for _ in range(3):
        make(due=NOW + HOUR)
    make(due=NOW + 30 * HOUR)  # beyond the next 24 h
    q = store._dialect.q

    def work(conn: Any) -> None:
        executemany(conn, q("UPDATE schedules SET status = 'DELIVERED', delivered_ms = ? "
                            "WHERE id = ?"), delivered)
        executemany(conn, q("UPDATE schedules SET status = ?, next_ms = ? WHERE id = ?"), ended)
        executemany(conn, q("INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                    attempts)

    store._work(work)


def _row(tenant: str, delivered: int, dead: int, cancelled: int, retried: int, sla: int,
         late: tuple[int, int, int, int], hour: int | None = None) -> dict[str, Any]:
    row = {"tenant": tenant, "channel": "out", "delivered": delivered, "dead": dead,
           "cancelled": cancelled, "retried": retried, "sla_misses": sla,
           **dict(zip(("lateness_p50", "lateness_p95", "lateness_p99", "lateness_max"), late,
                      strict=True))}
    return row if hour is None else {**row, "hour": hour}


def test_a_report_with_nothing_in_it_renders_without_warnings() -> None:
    """A quiet store's report: each plot says it has nothing to show, and matplotlib is not
    asked for a legend of nothing (which it warns about on the operator's terminal)."""
    import warnings

    from tocsin.pipelines.report_html import render

    empty = {"hours": [], "totals": [], "upcoming": [], "since_ms": NOW - 24 * HOUR,
             "until_ms": NOW, "sla_ms": 60_000}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        page = render(empty)
    assert page.count("data:image/png;base64,") == 3


def test_a_report_refuses_bad_figures(tmp_path: Path) -> None:
    from tocsin.errors import ValidationError

    settings = Settings(home=tmp_path)
    for kw, field in (({"since_ms": 0, "sla_ms": 0}, "since"),
                      ({"since_ms": HOUR, "sla_ms": -1}, "sla"),
                      ({"since_ms": HOUR, "sla_ms": 0, "partitions": 0}, "partitions")):
        with pytest.raises(ValidationError) as caught:
            run_report(None, settings=settings, out_dir=tmp_path / "r", **kw)  # type: ignore[arg-type]
        assert caught.value.field == field
    assert not (tmp_path / "tocsin.db").exists()


def test_time_slices() -> None:
    assert time_slices(0, 10, 3) == [(0, 3), (3, 6), (6, 10)]
    assert time_slices(5, 7, 8) == [(5, 6), (6, 7)]


def test_golden_figures_and_the_page(spark: SparkSession, backend_url: str,
                                     tmp_path: Path) -> None:
    settings = Settings(store=backend_url, home=tmp_path, buckets=16,
                        archive_retention_seconds=5400, task_key_retention_seconds=0)
    store = open_store(backend_url, buckets=16)
    _history(store)
    archived = run_archive(spark, settings=settings, clock=ManualClock(NOW), partitions=2)
    assert archived["schedules"] == 4  # the first hour's: read back from the archive
    report = run_report(spark, settings=settings, since_ms=7 * 24 * HOUR, sla_ms=1000,
                        out_dir=tmp_path / "report", clock=ManualClock(NOW), partitions=3)
    assert report["hours"] == [
        _row("default", 4, 0, 0, 1, 0, (200, 400, 400, 400), H - 2 * HOUR),
        _row("default", 2, 1, 1, 0, 1, (1000, 5000, 5000, 5000), H - HOUR),
        _row("t2", 1, 0, 0, 0, 0, (50, 50, 50, 50), H - HOUR)]
    assert report["totals"] == [_row("default", 6, 1, 1, 1, 1, (300, 5000, 5000, 5000)),
                                _row("t2", 1, 0, 0, 0, 0, (50, 50, 50, 50))]
    assert report["upcoming"] == [
        {"tenant": "default", "channel": "out", "hour": H, "due": 1},
        {"tenant": "default", "channel": "out", "hour": H + HOUR, "due": 3}]
    written = json.loads((tmp_path / "report" / "report.json").read_text())
    assert written["totals"] == report["totals"]
    page = (tmp_path / "report" / "report.html").read_text()
    assert page.count("data:image/png;base64,") == 3
    store.close()
    if backend_url.startswith("sqlite"):
        _screenshot(tmp_path / "report" / "report.html", tmp_path / "report.png")


def _screenshot(page: Path, png: Path) -> None:
    """Open the page in headless Chromium, keep its screenshot, and check it shows the plots
    (many colours, not a blank page)."""
    chromium = shutil.which("chromium")
    if chromium is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is not installed (scripts/bootstrap.sh --dev installs it)")
        pytest.skip("chromium is not installed")
    subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu",
                    "--hide-scrollbars", f"--screenshot={png}", "--window-size=1000,1500",
                    page.as_uri()], check=True, timeout=120, capture_output=True)
    from matplotlib import image

    pixels = image.imread(png)
    colours = {tuple(p) for p in pixels.reshape(-1, pixels.shape[-1])[::7].tolist()}
    assert len(colours) > 50, "the screenshot looks blank"
    if target := os.environ.get("TOCSIN_REPORT_SCREENSHOT"):
        shutil.copy(png, target)


def _old_archive_file(root: Path) -> None:
    """A schedules file as archived before labels existed (no ``labels`` column): one
    delivered schedule of the report's period."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tocsin.pipelines.archive import SCHEDULES

    old = pa.schema([f for f in SCHEDULES if f.name not in ("labels", "day")])
    values: dict[str, Any] = {f.name: [None] for f in old}
    values.update(id=["old-1"], tenant=["default"], channel=["out"], payload=[b"{}"],
                  payload_kind=["json"], headers=["{}"], due_ms=[H - 3 * HOUR], bucket=[0],
                  status=["DELIVERED"], attempts=[1], created_ms=[H - 4 * HOUR],
                  delivered_ms=[H - 3 * HOUR], finished_ms=[H - 3 * HOUR], archived_ms=[H])
    folder = root / "schedules" / "run=1" / f"day={H // 86_400_000}" / "tenant=default"
    folder.mkdir(parents=True)
    pq.write_table(pa.table(values, schema=old), folder / "part-old.parquet")


def test_a_report_by_label_counts_the_schedules_carrying_it(spark: SparkSession,
                                                            backend_url: str,
                                                            tmp_path: Path) -> None:
    """``--label team=a``: finished schedules, attempts and what is upcoming of the schedules
    carrying the pair alone, in the store and in the archive (a file archived before labels
    existed matches no selector); the same history without the selector counts every one."""
    settings = Settings(store=backend_url, home=tmp_path, buckets=16,
                        archive_retention_seconds=5400, task_key_retention_seconds=0)
    store = open_store(backend_url, buckets=16)

    def make(team: str, due: int = H) -> str:
        return str(store.create([NewSchedule(
            channel="out", payload=b"{}", due_ms=due, labels={"team": team, "run": "r"})],
            now_ms=H - 10 * HOUR)[0][0].id)

    # (team, lateness, when it ended): the first hour's go to the archive.
    delivered = [(team, late, end, make(team)) for team, late, end in
                 (("a", 100, H - 2 * HOUR + 10 * MIN), ("a", 300, H - HOUR + 10 * MIN),
                  ("b", 7000, H - 2 * HOUR + 10 * MIN), ("b", 9000, H - HOUR + 10 * MIN),
                  ("b", 8000, H - HOUR + 10 * MIN))]
    dead = make("b")
    for _ in range(2):
        make("a", due=NOW + HOUR)
    make("b", due=NOW + HOUR)
    q = store._dialect.q

    def work(conn: Any) -> None:
        executemany(conn, q("UPDATE schedules SET status = 'DELIVERED', delivered_ms = ? "
                            "WHERE id = ?"), [(end, sid) for _, _, end, sid in delivered])
        conn.execute(q("UPDATE schedules SET status = 'DEAD', next_ms = ? WHERE id = ?"),
                     (H - HOUR + 20 * MIN, dead))
        executemany(conn, q("INSERT INTO deliveries VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
                    [(f"{sid}-1", sid, 1, 1, end - 5, end, "delivered", None, late)
                     for _, late, end, sid in delivered])

    store._work(work)
    archived = run_archive(spark, settings=settings, clock=ManualClock(NOW), partitions=2)
    assert archived["schedules"] == 2  # the first hour's
    store.close()
    _old_archive_file(Path(settings.archive_path))
    by_label = run_report(spark, settings=settings, since_ms=24 * HOUR, sla_ms=1000,
                          out_dir=tmp_path / "a", clock=ManualClock(NOW), partitions=2,
                          label="team=a")
    assert by_label["label"] == "team=a"
    assert by_label["totals"] == [_row("default", 2, 0, 0, 0, 0, (100, 300, 300, 300))]
    assert by_label["upcoming"] == [{"tenant": "default", "channel": "out",
                                     "hour": H + HOUR, "due": 2}]
    both = run_report(spark, settings=settings, since_ms=24 * HOUR, sla_ms=1000,
                      out_dir=tmp_path / "all", clock=ManualClock(NOW), partitions=2,
                      label="run=r")
    assert both["totals"] == [_row("default", 5, 1, 0, 0, 3, (7000, 9000, 9000, 9000))]
    assert both["upcoming"][0]["due"] == 3
    everything = run_report(spark, settings=settings, since_ms=24 * HOUR, sla_ms=1000,
                            out_dir=tmp_path / "every", clock=ManualClock(NOW), partitions=2)
    assert everything["totals"][0]["delivered"] == 6  # the old file's schedule too
    from tocsin.errors import ValidationError

    with pytest.raises(ValidationError) as caught:
        run_report(spark, settings=settings, since_ms=HOUR, sla_ms=0, out_dir=tmp_path / "x",
                   label="team")
    assert caught.value.field == "label"

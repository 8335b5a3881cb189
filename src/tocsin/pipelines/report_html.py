"""The HTML page of ``tocsin report``: three plots (matplotlib, PNG embedded) and the tables.
Spark-free: it renders the report's figures (:func:`tocsin.pipelines.report.run_report`)."""

from __future__ import annotations

import base64
import html
import io
from collections import defaultdict
from datetime import UTC, datetime
from typing import Any

__all__ = ["render"]

_OUTCOMES = ("delivered", "retried", "dead", "cancelled")


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _x(when: datetime) -> float:
    """Matplotlib's date number of ``when``: days since its epoch, 1970-01-01 UTC."""
    return when.timestamp() / 86_400


def _png(figure: Any) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def _legend(ax: Any, data: list[Any], empty: str) -> None:
    """The plot's legend, or, when it has nothing to show, ``empty`` written across it."""
    if data:
        ax.legend(fontsize=7)
    else:
        _empty(ax, empty)


def _empty(ax: Any, text: str) -> None:
    """``text`` across a plot that has no data, and no axis ticks."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, color="grey")
    ax.set_xticks([])
    ax.set_yticks([])


def _plots(report: dict[str, Any]) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    plots = []
    fig, ax = plt.subplots(figsize=(9, 3.2))
    series: dict[str, list[tuple[datetime, int, int]]] = defaultdict(list)
    for row in report["hours"]:
        if row["lateness_p50"] is not None:
            series[f"{row['tenant']}/{row['channel']}"].append(
                (_when(row["hour"]), row["lateness_p50"], row["lateness_p99"]))
    for name, points in sorted(series.items()):
        xs = [_x(p[0]) for p in points]
        line = ax.plot(xs, [p[1] / 1000 for p in points], marker=".",
                       label=f"{name} p50")[0]
        ax.plot(xs, [p[2] / 1000 for p in points], linestyle="--",
                color=line.get_color(), label=f"{name} p99")
    ax.xaxis_date()
    ax.set_title("Lateness per hour")
    if series:
        ax.axhline(report["sla_ms"] / 1000, color="red", linewidth=0.8, label="SLA")
        ax.set_ylabel("lateness (s)")
        ax.legend(fontsize=7, ncols=2)
    else:
        _empty(ax, "no deliveries in the period")
    fig.autofmt_xdate()
    plots.append(("Lateness over time", _png(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 3.2))
    names = [f"{t['tenant']}/{t['channel']}" for t in report["totals"]]
    left = [0] * len(names)
    for outcome in _OUTCOMES:
        values = [t[outcome] for t in report["totals"]]
        ax.barh(names, values, left=left, label=outcome)
        left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_title("Outcome mix per channel")
    _legend(ax, names, "nothing finished in the period")
    plots.append(("Outcome mix", _png(fig)))
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(9, 3.2))
    due: dict[str, dict[datetime, int]] = defaultdict(dict)
    for row in report["upcoming"]:
        due[f"{row['tenant']}/{row['channel']}"][_when(row["hour"])] = row["due"]
    hours = sorted({h for d in due.values() for h in d})
    bottom = [0] * len(hours)
    for name, counts in sorted(due.items()):
        values = [counts.get(h, 0) for h in hours]
        ax.bar([_x(h) for h in hours], values, bottom=bottom, width=0.035, label=name)
        bottom = [a + b for a, b in zip(bottom, values, strict=True)]
    ax.xaxis_date()
    ax.set_title("Falling due in the next 24 h (per hour)")
    _legend(ax, hours, "nothing falls due in the next 24 hours")
    fig.autofmt_xdate()
    plots.append(("Next 24 hours", _png(fig)))
    plt.close(fig)
    return plots


def _table(rows: list[dict[str, Any]], columns: list[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(_cell(c, r.get(c)))}</td>" for c in columns) + "</tr>"
        for r in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _cell(column: str, value: Any) -> str:
    if value is None:
        return "-"
    if column == "hour":
        return _when(value).strftime("%Y-%m-%d %H:00")
    return str(value)


def render(report: dict[str, Any]) -> str:
    """The report as one self-contained HTML page."""
    span = (f"{_when(report['since_ms']):%Y-%m-%d %H:%M} to "
            f"{_when(report['until_ms']):%Y-%m-%d %H:%M} UTC")
    figures = "".join(f"<h2>{html.escape(title)}</h2><img alt='{html.escape(title)}' "
                      f"src='data:image/png;base64,{data}'>" for title, data in _plots(report))
    columns = ["tenant", "channel", *_OUTCOMES, "sla_misses", "lateness_p50", "lateness_p95",
               "lateness_p99", "lateness_max"]
    return (
        "<!doctype html><html><head><meta charset='utf-8'><title>Tocsin report</title><style>"
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;font-size:13px}"
        "td,th{border:1px solid #ccc;padding:2px 6px;text-align:right}</style></head><body>"
        f"<h1>Tocsin delivery report</h1><p>{html.escape(span)}; SLA "
        f"{report['sla_ms'] / 1000:g} s; lateness in ms.</p>{figures}"
        f"<h2>Per channel</h2>{_table(report['totals'], columns)}"
        f"<h2>Per hour</h2>{_table(report['hours'], ['hour', *columns])}"
        "</body></html>")

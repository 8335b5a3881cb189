"""Today's figures at a glance: the table at the top of docs/benchmarks.md, made from
``bench/results/*.json``.

    bench/run summary             # stamp the results, rewrite the table
    bench/run summary --check     # exit 1 when the table is not what the results give

One row per figure a user asks about first (dispatch, punctuality by load, isolation,
destinations, channels, import, ingest, archive, recurring, idle and start, labels), each
with its store, its load, the peer it is set against in the same run, and the date and commit
of the run. The table lies between :data:`BEGIN` and :data:`END`; everything else on the page (the
history of each figure) is left as it is, so running this again after new results only
refreshes the table. A results file that names neither its date nor its commit (files older
than this script) is stamped first with those of the commit that recorded it (``git log``),
so the table is a function of the JSON alone: the test that guards it
(``tests/test_benchmarks_summary.py``) regenerates it without git.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
PAGE = REPO / "docs" / "benchmarks.md"
BEGIN = "<!-- summary:begin (bench/run summary writes this table; edit bench/summary.py) -->"
END = "<!-- summary:end -->"
HEADER = ("| area | figure | Tocsin | peer in the same run | store | load | date | commit |\n"
          "|---|---|---|---|---|---|---|---|")

Doc = dict[str, Any]


@dataclass(frozen=True, kw_only=True, slots=True)
class Row:
    """One figure of the table."""

    area: str
    figure: str
    value: str
    peer: str
    store: str
    load: str
    source: str
    """The results file's name (``dispatch-sqlite.json``): its date and commit are the row's,
    unless the figure was kept from an older run (``kept_from`` of ``key``)."""
    key: str | None = None
    """The figure's key in the results file, when an ``--update`` run may have kept it."""


def num(value: Any, unit: str = "") -> str:
    """``value`` for a reader: thousands apart (``19 996``), one decimal below 100."""
    if value is None:
        return "—"
    if isinstance(value, float) and abs(value) < 100 and value != int(value):
        text = f"{value:.1f}" if abs(value) >= 10 else f"{value:.2f}"
    else:
        text = f"{round(value):,}".replace(",", " ")
    return f"{text}{unit}"


TIMES = "\u00d7"
"""The multiplication sign after a ratio."""


def ratio(value: Any) -> str:
    """A ratio, Tocsin's figure over the peer's: ``1.60`` and :data:`TIMES`."""
    return "—" if value is None else f"{value:.2f}{TIMES}"


def stamp(doc: Doc) -> tuple[str, str]:
    """A results file's date (``YYYY-MM-DD``) and commit: its own ``date``/``run_at`` and
    ``commit``/``code.commit``; ``?`` where it has none (run ``bench/run summary``)."""
    when = doc.get("run_at") or doc.get("date") or "?"
    code = doc.get("code")
    commit = doc.get("commit") or (code.get("commit") if isinstance(code, dict) else None)
    return str(when)[:10], str(commit or "?")


def row_stamp(doc: Doc, row: Row) -> tuple[str, str]:
    """The date and commit of ``row``'s figure: its file's, or, for a figure an ``--update``
    run kept from an older run, that run's (``kept_from``)."""
    kept = (doc.get("kept_from") or {}).get(row.key) if row.key else None
    if not isinstance(kept, dict):
        return stamp(doc)
    return str(kept.get("run_at") or "?")[:10], str(kept.get("commit") or "?")


def _dig(doc: Doc, *path: str) -> Any:
    for key in path:
        if not isinstance(doc, dict):
            return None
        doc = doc.get(key)  # type: ignore[assignment]
    return doc


def dispatch(name: str, doc: Doc) -> Iterator[Row]:
    store = "PostgreSQL" if "postgres" in name else "SQLite"
    tocsin = _dig(doc, "summary", "tocsin") or {}
    peers = {k: v for k, v in (doc.get("summary") or {}).items() if k != "tocsin"}
    ratios = doc.get("ratios_tocsin_over_peer") or {}
    schedules = doc.get("schedules")
    burst = f"{num(schedules)} due over 10 s, file channel"
    drain = f"{num(schedules)} due at once"

    def versus(key: str, unit: str = "") -> str:
        return "; ".join(f"{peer} {num(v.get(key), unit)} ({ratio(ratios.get(peer, {}).get(key))})"
                         for peer, v in peers.items() if isinstance(v, dict)) or "—"

    yield Row(area="dispatch", figure="burst deliveries/s", store=store, load=burst,
              value=num(tocsin.get("deliveries_per_s"), "/s"),
              peer=versus("deliveries_per_s", "/s"), source=name)
    yield Row(area="dispatch", figure="burst lateness p99", store=store, load=burst,
              value=num(tocsin.get("lateness_p99_ms"), " ms"),
              peer=versus("lateness_p99_ms", " ms"), source=name)
    yield Row(area="dispatch", figure="drain capacity", store=store, load=drain,
              value=num(tocsin.get("drain_deliveries_per_s"), "/s"),
              peer=versus("drain_deliveries_per_s", "/s"), source=name)


def lateness(name: str, doc: Doc) -> Iterator[Row]:
    stores = [s for s in ("sqlite", "postgres") if any(k.startswith(f"{s}_p99_ms_") for k in doc)]
    rates = sorted({int(k.rsplit("_", 1)[1]) for k in doc
                    if "_p99_ms_" in k and k.rsplit("_", 1)[1].isdigit()})
    for store in stores:
        other = "postgres" if store == "sqlite" else "sqlite"
        for rate in rates:
            theirs = doc.get(f"{other}_p99_ms_{rate}")
            yield Row(area="punctuality by load", figure="webhook lateness p99",
                      store=_store_name(store), load=f"{num(rate)} due a second",
                      value=num(doc.get(f"{store}_p99_ms_{rate}"), " ms"),
                      peer="—" if theirs is None else
                      f"{_store_name(other)} {num(theirs, ' ms')}", source=name)
        if (creates := doc.get(f"{store}_creates_per_s")) is not None:
            yield Row(area="punctuality by load", figure="API creates/s",
                      store=_store_name(store), load="batches of 1 000, one client",
                      value=num(creates, "/s"), peer="—", source=name)


def isolation(name: str, doc: Doc) -> Iterator[Row]:
    store = "PostgreSQL" if "postgres" in name else "SQLite"
    args = doc.get("args") or {}
    alone = doc.get("victim_p99_ms_alone")
    load = f"victim {num(args.get('rate'))}/s beside a neighbour"
    for neighbour in ("slow", "tarpit", "volume"):
        value = doc.get(f"victim_p99_ms_{neighbour}_neighbour")
        if value is not None:
            yield Row(area="isolation", figure=f"victim p99, {neighbour} neighbour", store=store,
                      load=load, value=num(value, " ms"),
                      peer=f"victim alone {num(alone, ' ms')}", source=name)
    if (drain := doc.get("neighbour_volume_deliveries_per_s")) is not None:
        yield Row(area="isolation", figure="volume neighbour's drain", store=store,
                  load=f"burst of {num(args.get('burst'))} beside the victim",
                  value=num(drain, "/s"),
                  peer=f"alone {num(doc.get('neighbour_volume_alone_deliveries_per_s'), '/s')} "
                       f"({ratio(doc.get('volume_drain_ratio'))})", source=name)


def figures(area: str, *, known: tuple[str, ...] = ()) -> Callable[[str, Doc], Iterator[Row]]:
    """Rows of a results file's top-level numbers (``…_per_s``, ``…_ms``, ``…_ratio``) that
    no row reads yet (keys not starting with one of ``known``)."""

    def rows(name: str, doc: Doc) -> Iterator[Row]:
        store = _store_name(str(doc.get("store", "")))
        for key, value in doc.items():
            if (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and key.endswith(("_per_s", "_ms", "_ratio", "_mb"))
                    and not key.startswith(known)):
                yield Row(area=area, figure=key.replace("_", " "), value=num(value),
                          peer="—", store=store, load="—", source=name)

    return rows


_CLAIM_KEYS = tuple(f"{store}_{what}" for store in ("sqlite", "postgres")
                    for what in ("claim_", "next_due_", "peek_"))


def destinations(name: str, doc: Doc) -> Iterator[Row]:
    for store in ("sqlite", "postgres"):
        idle = next((k for k in doc if k.startswith(f"{store}_claim_ms_")
                     and k.endswith("_idle")), None)
        if idle is None:
            continue
        count = idle.removeprefix(f"{store}_claim_ms_").removesuffix("_idle")
        yield Row(area="destinations", figure="claim of a due destination's rows",
                  store=_store_name(store),
                  load=f"beside {num(int(count) if count.isdigit() else None)} idle "
                       "destinations",
                  value=num(doc.get(idle), " ms"),
                  peer=f"alone {num(doc.get(f'{store}_claim_ms_1'), ' ms')} "
                       f"({ratio(doc.get(f'{store}_claim_ratio'))})", source=name)
    yield from _deliveries(name, doc)
    yield from figures("destinations", known=_CLAIM_KEYS)(name, doc)


def _deliveries(name: str, doc: Doc) -> Iterator[Row]:
    """The delivery engine's run: the same load on one destination and on many."""
    args = _dig(doc, "delivery_runs", "args") or {}
    many = str(args.get("destinations", ""))
    if f"p99_ms_{many}" not in doc:
        return
    store = _store_name(str(args.get("store", "sqlite")))
    load = (f"{num(args.get('rate'))} webhooks/s over {num(int(many))} destinations "
            f"({num(args.get('tenants'))} tenants)")
    yield Row(area="destinations", figure="webhook lateness p99", store=store, load=load,
              value=num(doc.get(f"p99_ms_{many}"), " ms"),
              peer=f"one destination {num(doc.get('p99_ms_1'), ' ms')} "
                   f"({ratio(doc.get(f'p99_ratio_{many}'))})",
              source=name, key=f"p99_ms_{many}")
    yield Row(area="destinations", figure="threads of the Python processes, peak",
              store=store, load=load, value=num(doc.get(f"threads_peak_{many}")),
              peer=f"one destination {num(doc.get('threads_peak_1'))}", source=name,
              key=f"threads_peak_{many}")
    pss = doc.get(f"pss_mb_peak_{many}")
    yield Row(area="destinations", figure="memory of `tocsin up`, peak (RSS sum)", store=store,
              load=load, value=num(doc.get(f"rss_mb_peak_{many}"), " MB")
              + ("" if pss is None else f" (PSS {num(pss, ' MB')})"),
              peer=f"one destination {num(doc.get('rss_mb_peak_1'), ' MB')}", source=name,
              key=f"rss_mb_peak_{many}")


def channels(name: str, doc: Doc) -> Iterator[Row]:
    summary = doc.get("summary") or {}
    pending = doc.get("pending_schedules")
    store = _store_name(str(doc.get("store", "sqlite")))
    celery, aps = summary.get("celery") or {}, summary.get("apscheduler") or {}
    no_peer = "— (no peer in this run)"
    yield Row(area="channels", figure="webhook drain", store=store, load="all due at once",
              value=num(doc.get("webhook_drain_per_s"), "/s"), key="webhook_drain_per_s",
              peer=f"Celery {num(celery.get('drain_per_s'), '/s')} "
                   f"({ratio(doc.get('webhook_vs_celery'))}); APScheduler "
                   f"{num(aps.get('drain_per_s'), '/s')}" if celery else no_peer, source=name)
    for kind in ("file", "kafka", "rabbitmq"):
        yield Row(area="channels", figure=f"{kind} drain", store=store, load="all due at once",
                  value=num(doc.get(f"{kind}_drain_per_s"), "/s"), peer="—", source=name,
                  key=f"{kind}_drain_per_s")
    for kind in ("sqs", "redis_streams", "nats"):  # beside the file channel of their own run
        if doc.get(f"{kind}_drain_per_s") is None:
            continue
        alone = doc.get(f"{kind}_emulator_raw_per_s")  # the SQS emulator on its own
        yield Row(area="channels", figure=f"{kind} drain", store=store, load="all due at once",
                  value=num(doc.get(f"{kind}_drain_per_s"), "/s"),
                  peer=(f"emulator alone {num(alone, '/s')} "
                        f"({ratio(doc.get(f'{kind}_vs_emulator'))}); " if alone else "")
                  + f"file {num(doc.get('file_drain_per_s'), '/s')} "
                    f"({ratio(doc.get(f'{kind}_vs_file'))})", source=name,
                  key=f"{kind}_drain_per_s")
    yield Row(area="channels", figure="webhook p99 at half capacity", store=store,
              load=f"{num(_dig(summary, 'tocsin-webhook', 'half_rate_per_s'))}/s",
              value=num(doc.get("webhook_p99_ms_at_half"), " ms"), key="webhook_p99_ms_at_half",
              peer=f"Celery {num(celery.get('half_p99_ms'), ' ms')}" if celery else no_peer,
              source=name)
    yield Row(area="channels", figure="light load p99", store=store,
              load=f"a trickle, {num(pending)} pending",
              value=num(doc.get("light_p99_ms_10m_pending"), " ms"), key="light_p99_ms_10m_pending",
              peer=f"none pending {num(doc.get('light_p99_ms'), ' ms')}", source=name)


def webhook(name: str, doc: Doc) -> Iterator[Row]:
    """The rows of a webhook-only channels run (``--only webhook``): those it measured."""
    for row in channels(name, doc):
        if row.key is None or doc.get(row.key) is not None:
            yield row


def import_(name: str, doc: Doc) -> Iterator[Row]:
    rows = doc.get("rows")
    for store in ("sqlite", "postgres"):
        rates = {k.removeprefix(f"{store}_rows_per_s_"): v for k, v in doc.items()
                 if k.startswith(f"{store}_rows_per_s_") and not k.endswith("_shuffled")}
        if not rates:
            continue
        worst = min(rates, key=rates.__getitem__)
        best = max(rates, key=rates.__getitem__)
        load = f"{num(rows)} rows, {doc.get('files')} files"
        yield Row(area="import", figure="rows/s, slowest shape", store=_store_name(store),
                  load=f"{load}, {worst}", value=num(rates[worst], "/s"),
                  peer=f"fastest shape ({best}) {num(rates[best], '/s')} "
                       f"({ratio(doc.get(f'{store}_worst_over_best'))})", source=name,
                  key=f"{store}_rows_per_s_{worst}")
        shuffled = {k.removeprefix(f"{store}_shuffled_ratio_"): v for k, v in doc.items()
                    if k.startswith(f"{store}_shuffled_ratio_")}
        if shuffled:
            low = min(shuffled, key=shuffled.__getitem__)
            yield Row(area="import", figure="rows in any order, slowest shape",
                      store=_store_name(store), load=f"{load}, {low}, rows shuffled",
                      value=num(doc.get(f"{store}_rows_per_s_{low}_shuffled"), "/s"),
                      peer=f"same rows in due order {num(rates.get(low), '/s')} "
                           f"({ratio(shuffled[low])})", source=name,
                      key=f"{store}_rows_per_s_{low}_shuffled")
        for growth in ("growth_ratio", "growth_ratio_shuffled"):
            if (value := doc.get(f"{store}_{growth}")) is not None:
                detail = doc.get(f"{store}_{growth.replace('_ratio', '')}") or {}
                server = detail.get("server_settings", "defaults")
                yield Row(area="import", figure="last million over first" + (
                    ", shuffled" if growth.endswith("shuffled") else ""),
                    store=_store_name(store), load=f"{num(detail.get('rows'))} rows" + (
                        "" if server == "defaults" else f", server `{server}`"),
                    value=ratio(value), peer="—", source=name, key=f"{store}_{growth}")


def ingest(name: str, doc: Doc) -> Iterator[Row]:
    peer = doc.get("peer_direct_store_create") or {}
    yield Row(area="ingest", figure="HTTP creates/s", store=_store_name(doc.get("store", "")),
              load=f"{doc.get('clients')} clients, batches of {num(doc.get('batch'))}, "
                   f"{doc.get('replicas')} API processes",
              value=num(doc.get("schedules_per_s"), "/s"),
              peer=f"store's own create: p50 {num(peer.get('latency_p50_ms'), ' ms')} vs "
                   f"{num(doc.get('latency_p50_ms'), ' ms')} "
                   f"({ratio(doc.get('ratio_vs_peer'))})", source=name)


def kafka_ingest(name: str, doc: Doc) -> Iterator[Row]:
    yield Row(area="ingest", figure="Kafka commands/s", store=_store_name(doc.get("store", "")),
              load=f"{num(doc.get('commands'))} commands, {doc.get('partitions')} partitions",
              value=num(doc.get("commands_per_s"), "/s"), peer="—", source=name)


def archive(name: str, doc: Doc) -> Iterator[Row]:
    for store in ("sqlite", "postgres"):
        part = doc.get(store)
        if not isinstance(part, dict):
            continue
        yield Row(area="archive", figure="rows/s (schedules and attempts)",
                  store=_store_name(store),
                  load=f"{num(doc.get('rows'))} finished schedules",
                  value=num(doc.get(f"{store}_rows_per_s"), "/s"),
                  peer=f"hand-written script {num(_dig(part, 'peer', 'rows_per_s'), '/s')} "
                       f"({ratio(part.get('ratio_vs_peer'))})", source=name)


def recurring(name: str, doc: Doc) -> Iterator[Row]:
    load = f"{num(doc.get('rules'))} rules `{doc.get('cron')}`"
    peer = num(_dig(doc, "peer_expansion", "firings_per_s"), "/s")
    yield Row(area="recurring", figure="firings expanded/s", store="SQLite", load=load,
              value=num(doc.get("firings_per_s"), "/s"),
              peer=f"cronsim + executemany {peer} "
                   f"({ratio(doc.get('expansion_ratio_vs_peer'))})", source=name)
    oneoff = doc.get("oneoff_p99_ms")
    yield Row(area="recurring", figure="firing lateness p99", store="SQLite", load=load,
              value=num(doc.get("lateness_p99_ms"), " ms"),
              peer="—" if oneoff is None else
              f"as many one-off schedules due at once {num(oneoff, ' ms')} "
              f"({ratio(doc.get('lateness_ratio_vs_oneoff'))})", source=name)


def idle(name: str, doc: Doc) -> Iterator[Row]:
    default = doc.get("default") or {}
    store = _store_name(str(doc.get("store", "sqlite")))
    load = "`tocsin up`, nothing due"
    yield Row(area="idle and start", figure="CPU at rest", store=store, load=load,
              value=num(default.get("cpu_pct_of_one_core"), " % of a core"), peer="—",
              source=name)
    yield Row(area="idle and start", figure="memory at rest (RSS)", store=store, load=load,
              value=num(default.get("rss_mb"), " MB"), peer="—", source=name)
    if (after := default.get("after_burst_rss_mb")) is not None:
        yield Row(area="idle and start", figure="memory 60 s after a burst (RSS)",
                  store=store,
                  load=f"after {num(default.get('burst'))} deliveries",
                  value=num(after, " MB"),
                  peer=f"fresh {num(default.get('rss_mb'), ' MB')}", source=name)
    yield Row(area="idle and start", figure="start to ready", store=store,
              load="`tocsin up`, fresh store", value=num(default.get("ready_s"), " s"),
              peer="—", source=name)


def labels(name: str, doc: Doc) -> Iterator[Row]:
    for store in ("sqlite", "postgres"):
        if doc.get(f"{store}_rare_p50_ms") is None:
            continue
        load = f"{num(doc.get(f'{store}_schedules'))} schedules, pages of 100"
        peer = num(doc.get(f"{store}_peer_p50_ms"), " ms")
        for kind, what in (("rare", "a pair on 0.1 %"), ("common", "a pair on 10 %"),
                           ("two_pairs", "two pairs")):
            yield Row(area="labels", figure=f"list by selector p50, {what}",
                      store=_store_name(store), load=load,
                      value=num(doc.get(f"{store}_{kind}_p50_ms"), " ms"),
                      peer=f"no selector {peer} ({ratio(doc.get(f'{store}_{kind}_over_peer'))})",
                      source=name)


def _store_name(kind: str) -> str:
    if "postgres" in kind:
        return "PostgreSQL"
    return "SQLite" if "sqlite" in kind else kind or "—"


SOURCES: tuple[tuple[str, Callable[[str, Doc], Iterator[Row]], str], ...] = (
    ("dispatch-sqlite.json", dispatch, "bench/run dispatch --peer poller"),
    ("dispatch-postgres.json", dispatch, "bench/run dispatch --store postgres"),
    ("lateness.json", lateness, "bench/run lateness"),
    ("isolation.json", isolation, "bench/run isolation"),
    ("isolation-postgres.json", isolation, "bench/run isolation --store postgres"),
    ("destinations.json", destinations, "bench/run destinations"),
    ("channels.json", channels, "bench/run channels"),
    ("channels-webhook.json", webhook,
     "bench/run channels --only webhook --out bench/results/channels-webhook.json"),
    ("import.json", import_, "bench/run import --shapes all"),
    ("ingest-sqlite.json", ingest, "bench/run ingest"),
    ("ingest-postgres.json", ingest, "bench/run ingest --store postgres"),
    ("kafka-ingest.json", kafka_ingest, "bench/run kafka-ingest"),
    ("archive.json", archive, "bench/run archive"),
    ("recurring.json", recurring, "bench/run recurring"),
    ("idle.json", idle, "bench/run idle"),
    ("idle-postgres.json", idle, "bench/run idle --store postgresql://…"),
    ("labels.json", labels, "bench/run labels"),
)
"""Each results file of the table, in the table's order, with how its rows are read and the
command that writes it."""


def load_results(folder: Path = RESULTS) -> dict[str, Doc]:
    """The results files of :data:`SOURCES` found in ``folder``, by name."""
    return {name: json.loads((folder / name).read_text()) for name, _, _ in SOURCES
            if (folder / name).exists()}


def table(results: dict[str, Doc]) -> str:
    """The summary block (between :data:`BEGIN` and :data:`END`, both included)."""
    lines = [BEGIN, "", HEADER]
    missing = []
    for name, read, command in SOURCES:
        doc = results.get(name)
        if doc is None:
            missing.append(f"`{command}`")
            continue
        for row in read(name, doc):
            date, commit = row_stamp(doc, row)
            cells = (f"[{row.area}](../bench/results/{name})", row.figure,
                     f"**{row.value}**", row.peer, row.store, row.load, date, f"`{commit}`")
            lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    lines.append("")
    lines.append("Each area links to the results file its row comes from. A ratio is Tocsin's "
                 "figure over the peer's, both measured in the same run (for lateness, memory "
                 "and time, lower is better). The commit is the one the run measured, or for "
                 "runs that did not record it, the one that recorded the file; a figure an "
                 "`--update` run kept from an older run shows that run's date and commit.")
    if missing:
        lines.append(f"Not measured yet: {', '.join(missing)}.")
    lines += ["", END]
    return "\n".join(lines)


def with_table(page: str, block: str) -> str:
    """``page`` with its summary block replaced by ``block``."""
    if BEGIN not in page or END not in page:
        raise ValueError(f"the page has no summary block ({BEGIN} ... {END})")
    head, rest = page.split(BEGIN, 1)
    return head + block + rest.split(END, 1)[1]


def current_block(page: str) -> str | None:
    """The summary block of ``page`` as it is written, or None."""
    if BEGIN not in page or END not in page:
        return None
    return BEGIN + page.split(BEGIN, 1)[1].split(END, 1)[0] + END


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""


def _stamp_kept(doc: Doc, path: Path) -> bool:
    """Give each figure kept from an older run that names no commit the commit that recorded
    that run: the first to change ``path`` after it ran. Whether any was given one."""
    given = False
    for entry in (doc.get("kept_from") or {}).values():
        if isinstance(entry, dict) and not entry.get("commit") and entry.get("run_at"):
            first = _git("log", "--reverse", f"--since={entry['run_at']}", "--format=%h",
                         "--", str(path)).split("\n")[0]
            if first:
                entry["commit"] = first
                given = True
    return given


def stamp_files(folder: Path = RESULTS) -> list[str]:
    """Write ``date`` and ``commit`` into each results file of :data:`SOURCES` that names
    neither: those of the last commit that changed the file, or (a file not committed as it
    is) now and ``HEAD``. The files stamped."""
    stamped = []
    for name, _, _ in SOURCES:
        path = folder / name
        if not path.exists():
            continue
        doc = json.loads(path.read_text())
        date, commit = stamp(doc)
        kept = _stamp_kept(doc, path)
        if date != "?" and commit != "?" and not kept:
            continue
        changed = bool(_git("status", "--porcelain", "--", str(path)))
        logged = "" if changed else _git("log", "-1", "--format=%h %cI", "--", str(path))
        if logged:
            commit_of, date_of = logged.split(" ", 1)
        else:
            commit_of = _git("rev-parse", "--short", "HEAD") or "?"
            date_of = datetime.now(UTC).isoformat(timespec="seconds")
        if date == "?":
            doc["date"] = date_of
        if commit == "?":
            doc["commit"] = commit_of
        indent = 1 if '\n "' in path.read_text()[:200] else 2
        path.write_text(json.dumps(doc, indent=indent) + "\n")
        stamped.append(name)
    return stamped


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true",
                        help="Change nothing; exit 1 when the table is not the results'.")
    args = parser.parse_args()
    page = PAGE.read_text()
    if args.check:
        if current_block(page) != table(load_results()):
            print("docs/benchmarks.md's summary is not what bench/results/*.json give: "
                  "run bench/run summary", file=sys.stderr)
            sys.exit(1)
        return
    for name in stamp_files():
        print(f"stamped bench/results/{name} with its date and commit", file=sys.stderr)
    PAGE.write_text(with_table(page, table(load_results())))
    print(f"wrote the summary of {PAGE.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    main()

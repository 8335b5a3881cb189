"""Issue 42: labels on schedules and recurring rules, found and acted on by a label selector
(list, bulk cancel and reschedule, re-drive), over real HTTP on both stores; the selector reads
the ``schedule_labels`` index, which the store's triggers keep."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from tocsin.abc import Store
from tocsin.domain import Ack, Outcome, Status


def _create(api: httpx.Client, labels: dict[str, str] | None, **body: Any) -> str:
    r = api.post("/v1/schedules", json={"channel": "out", "payload": {"n": 1}, "delay": 3600,
                                        **({"labels": labels} if labels is not None else {}),
                                        **body})
    assert r.status_code in (200, 201), r.text
    return str(r.json()["id"])


def _ids(api: httpx.Client, selector: str) -> set[str]:
    r = api.get("/v1/schedules", params={"label": selector, "limit": 1000})
    assert r.status_code == 200, r.text
    return {s["id"] for s in r.json()["items"]}


def test_labels_are_kept_and_a_selector_lists_what_carries_them(api: httpx.Client) -> None:
    run = uuid.uuid4().hex[:8]
    both = _create(api, {"run": run, "team": "billing", "campaign": "spring"})
    billing = _create(api, {"run": run, "team": "billing"})
    other = _create(api, {"run": run, "team": "search"})
    _create(api, None)
    got = api.get(f"/v1/schedules/{both}").json()
    assert got["labels"] == {"campaign": "spring", "run": run, "team": "billing"}
    assert api.get(f"/v1/schedules/{other}").json()["labels"] == {"run": run, "team": "search"}
    assert _ids(api, f"run={run}") == {both, billing, other}
    assert _ids(api, f"run={run},team=billing") == {both, billing}
    assert _ids(api, f"team=billing, run={run},campaign=spring") == {both}
    assert _ids(api, f"run={run},team=nobody") == set()


def test_bad_labels_and_selectors_are_refused_naming_the_field(api: httpx.Client) -> None:
    for labels, field in (({"bad key": "x"}, "labels"), ({"k": "a b"}, "labels.k"),
                          ({f"k{i}": "v" for i in range(17)}, "labels")):
        r = api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 60,
                                            "labels": labels})
        assert r.status_code == 422 and r.json()["error"]["field"] == field, r.text
    for selector in ("team", "team=a,b", "=x", ",".join(f"k{i}=v" for i in range(9))):
        r = api.get("/v1/schedules", params={"label": selector})
        assert r.status_code == 422 and r.json()["error"]["field"] == "label", (selector, r.text)


def test_a_key_with_other_labels_is_another_request(api: httpx.Client) -> None:
    key = f"k-{uuid.uuid4().hex[:8]}"
    first = _create(api, None, key=key)
    assert _create(api, None, key=key) == first  # a repeat without labels, as before them
    r = api.post("/v1/schedules", json={"channel": "out", "payload": {"n": 1}, "delay": 3600,
                                        "key": key, "labels": {"team": "x"}})
    assert r.status_code == 409, r.text


def test_bulk_cancel_and_reschedule_by_label(api: httpx.Client) -> None:
    run = uuid.uuid4().hex[:8]
    spring = {_create(api, {"run": run, "campaign": "spring"}) for _ in range(3)}
    autumn = {_create(api, {"run": run, "campaign": "autumn"}) for _ in range(2)}
    moved = api.post("/v1/schedules/reschedule", json={"label": f"run={run},campaign=autumn",
                                                       "shift": "PT1H"})
    assert moved.status_code == 200 and moved.json()["rescheduled"] == 2, moved.text
    cancelled = api.post("/v1/schedules/cancel", json={"label": f"campaign=spring,run={run}"})
    assert cancelled.status_code == 200 and cancelled.json()["cancelled"] == 3, cancelled.text
    assert {api.get(f"/v1/schedules/{i}").json()["status"] for i in spring} == {"CANCELLED"}
    assert {api.get(f"/v1/schedules/{i}").json()["status"] for i in autumn} == {"PENDING"}
    bad = api.post("/v1/schedules/cancel", json={"label": "nonsense"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "label"


def test_redrive_by_label(api: httpx.Client, api_store: Store) -> None:
    run = uuid.uuid4().hex[:8]
    now = int(time.time() * 1000)
    dead = []
    for team in ("billing", "billing", "search"):
        sid = _create(api, {"run": run, "team": team}, delay=0)
        dead.append(sid)
    for row in api_store.claim(epoch=api_store.next_epoch(), bucket_lo=0, bucket_hi=15,
                               until_ms=now + 1000, now_ms=now + 1000, lease_ms=60_000,
                               limit=1000):
        if row.id in dead:
            api_store.acknowledge(epoch=row.epoch, now_ms=now, acks=[Ack(
                schedule_id=row.id, delivery_id=f"{row.id}-1", attempt=1,
                outcome=Outcome.REJECTED, error="no", started_ms=now, ended_ms=now,
                due_ms=now, status=Status.DEAD)])
    assert {api_store.get(i).status for i in dead} == {Status.DEAD}
    r = api.post("/v1/schedules/redrive", json={"label": f"run={run},team=billing"})
    assert r.status_code == 200 and r.json() == {"redriven": 2}, r.text
    assert [api_store.get(i).status for i in dead] == [Status.PENDING, Status.PENDING,
                                                       Status.DEAD]


def test_a_rules_firings_carry_its_labels(api: httpx.Client, api_store: Store) -> None:
    run = uuid.uuid4().hex[:8]
    r = api.post("/v1/recurring", json={"channel": "out", "payload": 1, "cron": "0 0 1 1 *",
                                        "labels": {"run": run, "kind": "report"}, "count": 2})
    assert r.status_code == 201 and r.json()["labels"] == {"kind": "report", "run": run}, r.text
    rule = r.json()["id"]
    assert api.post(f"/v1/recurring/{rule}/trigger").status_code == 200
    assert len(_ids(api, f"run={run},kind=report")) == 2
    assert api.patch(f"/v1/recurring/{rule}", json={"labels": {"bad key": "x"}}).status_code \
        == 422


def test_the_index_follows_the_schedules(api: httpx.Client, api_store: Store) -> None:
    run = uuid.uuid4().hex[:8]
    sid = _create(api, {"run": run, "a": "1"})
    rows = api_store._rows(  # type: ignore[attr-defined]
        "SELECT key, value FROM schedule_labels WHERE schedule_id = ?", (sid,))
    assert sorted(rows) == [("a", "1"), ("run", run)]
    api_store._changed("DELETE FROM schedules WHERE id = ?", (sid,))  # type: ignore[attr-defined]
    assert api_store._rows(  # type: ignore[attr-defined]
        "SELECT key FROM schedule_labels WHERE schedule_id = ?", (sid,)) == []


def test_the_client_and_cli_speak_labels(api_server: Any, monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    from tocsin.cli.app import app
    from tocsin.client import Client

    run = uuid.uuid4().hex[:8]
    with Client(api_server.url, api_key=api_server.admin_key) as client:
        made = client.schedule("out", {"n": 1}, delay=3600, labels={"run": run, "t": "a"})
        client.schedule("out", {"n": 2}, delay=3600, labels={"run": run, "t": "b"})
        rule = client.add_recurring("0 0 1 1 *", "out", 1, labels={"run": run})
        assert rule["labels"] == {"run": run}
        assert [s["id"] for s in client.list_schedules(label=f"run={run},t=a")] == [made["id"]]
        monkeypatch.setenv("TOCSIN_API_KEY", api_server.admin_key)
        monkeypatch.setenv("TOCSIN_API_URL", api_server.url)
        listed = CliRunner().invoke(app, ["--json", "ls", "--label", f"run={run}"])
        assert listed.exit_code == 0, listed.output
        assert len(__import__("json").loads(listed.output)) == 2
        cancelled = CliRunner().invoke(app, ["--json", "cancel-where", "--label",
                                             f"run={run},t=b"])
        assert cancelled.exit_code == 0 and '"cancelled": 1' in cancelled.output, \
            cancelled.output
        assert client.cancel_where(label=f"run={run}")["cancelled"] == 1


def test_stats_by_label_over_http_client_and_cli(api: httpx.Client, api_server: Any,
                                                 monkeypatch: Any) -> None:
    from typer.testing import CliRunner

    from tocsin.cli.app import app
    from tocsin.client import Client

    run = uuid.uuid4().hex[:8]
    for team, count in (("a", 3), ("b", 1)):
        for _ in range(count):
            _create(api, {"run": run, "team": team}, delay=600)
    r = api.get("/v1/stats", params={"label": f"team=a,run={run}"})
    assert r.status_code == 200, r.text
    assert r.json()["label"] == f"run={run},team=a"
    assert [(c["channel"], c["pending"], c["due_soon"]) for c in r.json()["channels"]] == [
        ("out", 3, 3)]
    everything = api.get("/v1/stats").json()["channels"]
    assert sum(c["pending"] for c in everything) > 4  # the other tests' schedules too
    bad = api.get("/v1/stats", params={"label": "team"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "label", bad.text
    with Client(api_server.url, api_key=api_server.admin_key) as client:
        [figures] = client.stats(label=f"run={run}")
        assert figures["pending"] == 4
    monkeypatch.setenv("TOCSIN_API_KEY", api_server.admin_key)
    monkeypatch.setenv("TOCSIN_API_URL", api_server.url)
    shown = CliRunner().invoke(app, ["--json", "stats", "--label", f"run={run},team=b"])
    assert shown.exit_code == 0, shown.output
    assert [c["pending"] for c in __import__("json").loads(shown.output)] == [1]

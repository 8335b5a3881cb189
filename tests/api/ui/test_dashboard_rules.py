"""Issue 42: pause, resume, trigger and cancel recurring schedules from the dashboard, one at a
time or all that match a label selector, within the caller's tenant, behind the CSRF token."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.api.ui.test_dashboard import _browser, _csrf
from tocsin.apikeys.tokens import issue_key
from tocsin.domain import ChannelKind, ChannelSpec, CronTrigger, Recurring, Role
from tocsin.errors import NotFoundError
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ApiServer]:
    store = SQLiteStore(tmp_path / "t.db", buckets=8)
    for tenant in ("default", "acme"):
        store.put_channel(ChannelSpec(name="out", kind=ChannelKind.FILE, tenant=tenant,
                                      config={"path": f"{tenant}.jsonl"}))
    served = ApiServer(store).start()
    yield served
    served.stop()


def _rule(store: SQLiteStore, rule_id: str, labels: dict[str, str],
          tenant: str = "default") -> None:
    store.create_recurring(Recurring(id=rule_id, tenant=tenant,
                                     trigger=CronTrigger.parse("0 0 1 1 *", "UTC"),
                                     channel="out", payload=b"1", labels=labels), now_ms=0)


def _messages(store: SQLiteStore, rule_id: str) -> int:
    return len(store._rows("SELECT id FROM schedules WHERE recurring_id = ?", (rule_id,)))


def test_one_rule_and_all_matching_a_selector(server: ApiServer) -> None:
    store = server.store
    assert isinstance(store, SQLiteStore)
    _rule(store, "r-a", {"team": "billing"})
    _rule(store, "r-b", {"team": "billing", "kind": "report"})
    _rule(store, "r-c", {"team": "search"})
    ui = _browser(server, server.admin_key)
    page = ui.get("/ui/recurring").text
    assert "team=billing" in page and "Trigger now" in page
    token = _csrf(ui)
    assert ui.post("/ui/recurring/act", json={"action": "pause", "label": "team=billing"}
                   ).status_code == 403  # no CSRF token
    done = ui.post("/ui/recurring/act", json={"action": "pause", "label": "team=billing"},
                   headers=token)
    assert done.status_code == 200 and "pause: 2 recurring schedules" in done.text, done.text
    assert [store.get_recurring(i).paused for i in ("r-a", "r-b", "r-c")] == [True, True,
                                                                             False]
    ui.post("/ui/recurring/act", json={"action": "resume", "id": "r-a"}, headers=token)
    assert not store.get_recurring("r-a").paused
    fired = ui.post("/ui/recurring/act", json={"action": "trigger",
                                               "label": "team=billing,kind=report"},
                    headers=token)
    assert "trigger: 1 recurring schedule." in fired.text
    assert [_messages(store, i) for i in ("r-a", "r-b", "r-c")] == [0, 1, 0]
    ui.post("/ui/recurring/act", json={"action": "cancel", "id": "r-c"}, headers=token)
    with pytest.raises(NotFoundError):
        store.get_recurring("r-c")
    for bad, field in (({"action": "explode", "id": "r-a"}, "action"),
                       ({"action": "pause"}, "id"),
                       ({"action": "pause", "id": "r-a", "label": "a=b"}, "id"),
                       ({"action": "pause", "label": "nonsense"}, "label")):
        r = ui.post("/ui/recurring/act", json=bad, headers=token)
        assert r.status_code == 422 and field in r.text, (bad, r.text)


def test_a_tenant_key_acts_on_its_own_rules_only(server: ApiServer) -> None:
    store = server.store
    assert isinstance(store, SQLiteStore)
    _rule(store, "mine", {"team": "x"}, tenant="acme")
    _rule(store, "theirs", {"team": "x"})
    key = issue_key(store, role=Role.TENANT, tenant="acme", now_ms=0)[1]
    ui = _browser(server, key)
    token = _csrf(ui)
    done = ui.post("/ui/recurring/act", json={"action": "pause", "label": "team=x"},
                   headers=token)
    assert "pause: 1 recurring schedule." in done.text, done.text
    assert store.get_recurring("mine").paused and not store.get_recurring("theirs").paused
    assert ui.post("/ui/recurring/act", json={"action": "cancel", "id": "theirs"},
                   headers=token).status_code == 404
    store.get_recurring("theirs")  # still there


def test_the_schedules_page_filters_by_a_label_selector(server: ApiServer) -> None:
    """Issue 42: the schedules list takes a label selector (each row shows its labels); a
    tenant's key sees only its own tenant's matches; a bad selector is said, naming it."""
    from tocsin.domain import NewSchedule

    store = server.store

    def make(labels: dict[str, str], tenant: str = "default") -> str:
        [(s, _)] = store.create([NewSchedule(channel="out", payload=b"{}",
                                             due_ms=4_000_000_000_000, tenant=tenant,
                                             labels=labels)], now_ms=0)
        return s.id

    billing = make({"team": "billing", "kind": "invoice"})
    search = make({"team": "search"})
    theirs = make({"team": "billing"}, tenant="acme")
    admin = _browser(server, server.admin_key)
    page = admin.get("/ui/schedules", params={"label": "team=billing"}).text
    assert billing in page and theirs in page and search not in page
    assert "kind=invoice, team=billing" in page
    page = admin.get("/ui/schedules", params={"label": "team=billing,kind=invoice",
                                              "sort": "id"}).text
    assert billing in page and theirs not in page
    acme = _browser(server, issue_key(store, role=Role.TENANT, tenant="acme", now_ms=0)[1])
    page = acme.get("/ui/schedules", params={"label": "team=billing"}).text
    assert theirs in page and billing not in page
    page = admin.get("/ui/schedules", params={"label": "team"}).text
    assert "label: &#39;team&#39; is not key=value" in page or "label: 'team' is not" in page

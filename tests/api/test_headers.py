"""A message's headers at the edge (security review, round two), on both stores: names with
CR/LF or a space, framing and hop-by-hop names and Tocsin's own names are refused with 422 on
``headers`` by every create and change (schedules, recurring rules, the commands topic's and
the import's check); a webhook channel's configured headers follow the same rule."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tocsin.config import Settings
from tocsin.domain import NewSchedule
from tocsin.validation.schedule import ScheduleCheck

BAD = [("X Bad", "v"), ("X-A\r\nInjected", "v"), ("x\n", "v"), ("", "v"), ("a:b", "v"),
       ("Host", "evil.example"), ("content-length", "0"), ("Transfer-Encoding", "chunked"),
       ("Connection", "close"), ("Keep-Alive", "1"), ("Upgrade", "h2c"), ("TE", "trailers"),
       ("Trailer", "x"), ("Proxy-Authorization", "x"), ("Expect", "100-continue"),
       ("tocsin-delivery-id", "forged"), ("Tocsin-Attempt", "9"), ("webhook-signature", "v1,x"),
       ("X-Ok", "a\r\nInjected: 1"), ("X-Ok", "nul\x00")]


def _refused(r: httpx.Response) -> None:
    assert r.status_code == 422, r.text
    assert r.json()["error"]["field"].startswith("headers"), r.text


@pytest.mark.parametrize(("name", "value"), BAD)
def test_every_create_and_change_refuses_the_header(api: httpx.Client, name: str,
                                                    value: str) -> None:
    headers = {name: value}
    _refused(api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 60,
                                             "headers": headers}))
    sid = api.post("/v1/schedules", json={"channel": "out", "payload": 1,
                                          "delay": 60}).json()["id"]
    _refused(api.patch(f"/v1/schedules/{sid}", json={"headers": headers}))
    assert api.get(f"/v1/schedules/{sid}").json()["headers"] == {}
    _refused(api.post("/v1/recurring", json={"cron": "0 9 * * *", "channel": "out",
                                             "payload": 1, "headers": headers}))
    rid = api.post("/v1/recurring", json={"cron": "0 9 * * *", "channel": "out",
                                          "payload": 1}).json()["id"]
    _refused(api.patch(f"/v1/recurring/{rid}", json={"headers": headers}))
    batch = api.post("/v1/schedules", json={"schedules": [
        {"channel": "out", "payload": 1, "delay": 60},
        {"channel": "out", "payload": 2, "delay": 60, "headers": headers}]})
    assert batch.status_code == 422, batch.text


@pytest.mark.parametrize(("name", "value"), BAD)
def test_the_commands_topic_and_the_import_refuse_it(name: str, value: str) -> None:
    check = ScheduleCheck(Settings(), now_ms=1_800_000_000_000,
                          known=lambda kind, n, *, tenant: True)
    item: dict[str, Any] = {"channel": "out", "payload": 1, "delay": 60,
                            "headers": {name: value}}
    found = check.check(item)
    assert not isinstance(found, NewSchedule)
    assert found[0].field.startswith("headers"), found


@pytest.mark.parametrize(("name", "value"), [h for h in BAD if h[0]])
def test_a_webhook_channel_refuses_it_in_its_config(api: httpx.Client, name: str,
                                                    value: str) -> None:
    r = api.post("/v1/channels", json={"name": "hook", "kind": "webhook", "config": {
        "url": "https://example.com/x", "headers": {name: value}}})
    assert r.status_code == 422 and r.json()["error"]["field"].startswith("config.headers"), \
        r.text


def test_ordinary_headers_pass(api: httpx.Client) -> None:
    headers = {"X-Trace": "t-1", "Content-Type": "text/plain", "authorization": "Bearer x",
               "x-tocsin": "mine"}
    r = api.post("/v1/schedules", json={"channel": "out", "payload": 1, "delay": 60,
                                        "headers": headers})
    assert r.status_code == 201, r.text
    assert api.get(f"/v1/schedules/{r.json()['id']}").json()["headers"] == headers

"""The dashboard in headless Chromium (Debian's ``chromium`` and ``chromedriver``, driven by
Selenium) against a running API and a real dispatcher over one store with data in it: load
each page, re-drive a dead schedule and see it delivered, pause a channel and see deliveries
stop, then resume. Screenshots of every page go to ``TOCSIN_SCREENSHOTS`` (default: the
test's temporary directory)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tocsin.dispatcher.channel_cache import SPEC_TTL_MS
from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer
from tocsin.testing.dispatch import read_lines, running_dispatcher, wait_until

pytestmark = [pytest.mark.spark, pytest.mark.skipif(
    shutil.which("chromedriver") is None and os.environ.get("CI") != "true",
    reason="needs chromium and chromium-driver (scripts/bootstrap.sh --dev)")]


def _now() -> int:
    return time.time_ns() // 1_000_000


@pytest.fixture
def browser() -> Iterator[Any]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = "/usr/bin/chromium"
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu",
                 "--disable-dev-shm-usage", "--window-size=1400,1000"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    driver.implicitly_wait(5)
    yield driver
    driver.quit()


def test_dashboard_in_a_browser(spark: Any, browser: Any, tmp_path: Path) -> None:
    from selenium.webdriver.common.by import By

    shots = Path(os.environ.get("TOCSIN_SCREENSHOTS", tmp_path / "shots"))
    shots.mkdir(parents=True, exist_ok=True)
    store = SQLiteStore(tmp_path / "t.db", buckets=8)
    url = f"sqlite:///{tmp_path / 't.db'}"
    out, side, late = (tmp_path / f"{n}.jsonl" for n in ("out", "side", "late"))
    for name, path in (("out", out), ("side", side)):
        store.put_channel(ChannelSpec(name=name, kind=ChannelKind.FILE,
                                      config={"path": str(path)}))
    now = _now()
    store.create([NewSchedule(channel="out", payload=b'{"n": %d}' % i,
                              due_ms=now + 60_000 * (i % 1400)) for i in range(300)],
                 now_ms=now)
    dead = store.create([NewSchedule(channel="late", payload=b"{}", due_ms=now)],
                        now_ms=now)[0][0].id
    server = ApiServer(store).start()
    page = server.url + "/ui"

    def shot(name: str) -> None:
        wait_until(lambda: browser.execute_script(  # htmx settled: no request, swap or settle
            "return document.readyState === 'complete' && !document.querySelector("
            "'.htmx-request, .htmx-swapping, .htmx-settling')"), timeout_s=10,
            what="the page settled")
        browser.save_screenshot(str(shots / f"{name}.png"))

    try:
        with running_dispatcher(spark, url, tmp_path / "ck", buckets=8):
            wait_until(lambda: store.get(dead).status is Status.DEAD, timeout_s=120,
                       what="the unregistered channel's schedule dead")
            browser.get(page)  # no key yet: the login page
            assert browser.current_url.endswith("/ui/login")
            shot("login")
            browser.find_element(By.ID, "key").send_keys(server.admin_key)
            browser.find_element(By.ID, "signin").click()
            wait_until(lambda: browser.current_url.rstrip("/").endswith("/ui"), timeout_s=10,
                       what="the overview after signing in")
            wait_until(lambda: browser.find_elements(By.ID, "dead-count"), timeout_s=10,
                       what="the overview's figures")
            assert browser.find_element(By.ID, "dead-count").text == "1"
            shot("overview")
            for name in ("schedules", "channels", "keys", "recurring", "policies"):
                browser.get(f"{page}/{name}")
                assert browser.find_element(By.TAG_NAME, "h1").text
                shot(name)

            store.put_channel(ChannelSpec(name="late", kind=ChannelKind.FILE,
                                          config={"path": str(late)}))
            time.sleep(SPEC_TTL_MS / 1000 + 1)  # the dispatcher re-reads a channel this often
            browser.get(f"{page}/dead")
            assert dead in browser.page_source
            shot("dead")
            browser.find_element(By.CSS_SELECTOR, "button.redrive").click()
            wait_until(lambda: store.get(dead).status is Status.DELIVERED, timeout_s=60,
                       what="the re-driven schedule delivered")
            assert [line["delivery_id"] for line in read_lines(late)] == [f"{dead}-2"]
            browser.get(f"{page}/schedules/{dead}")
            assert browser.find_element(By.ID, "field-status").text == "DELIVERED"
            assert len(browser.find_elements(By.CSS_SELECTOR, "#attempts tr")) == 3
            shot("schedule")

            browser.get(f"{page}/channels")
            browser.find_element(By.ID, "pause-out").click()
            wait_until(lambda: store.paused_channels(), timeout_s=10, what="the pause")
            before = len(read_lines(out))
            now = _now()
            held = [s.id for s, _ in store.create(
                [NewSchedule(channel="out", payload=b"{}", due_ms=now - 100) for _ in range(5)],
                now_ms=now)]
            probe = store.create([NewSchedule(channel="side", payload=b"{}", due_ms=now)],
                                 now_ms=now)[0][0].id
            wait_until(lambda: store.get(probe).status is Status.DELIVERED, timeout_s=60,
                       what="the unpaused channel's delivery")
            assert {store.get(i).status for i in held} == {Status.PENDING}
            assert len(read_lines(out)) == before
            wait_until(lambda: browser.find_elements(By.ID, "resume-out"), timeout_s=10,
                       what="the page reloaded after the pause")
            shot("channels-paused")
            browser.find_element(By.ID, "resume-out").click()
            wait_until(lambda: {store.get(i).status for i in held} == {Status.DELIVERED},
                       timeout_s=60, what="deliveries after the resume")
    finally:
        server.stop()
        store.close()
    assert {p.name for p in shots.glob("*.png")} >= {
        "login.png", "overview.png", "dead.png", "channels-paused.png", "schedule.png"}

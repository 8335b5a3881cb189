"""The Python clients (sync and async) against a real API server, and their error mapping."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import httpx
import pytest

from tocsin.client import AsyncClient, Client
from tocsin.errors import (
    AuthenticationError,
    ConflictError,
    ForbiddenError,
    NotFoundError,
    QuotaExceededError,
    StoreError,
    TocsinError,
    ValidationError,
    error_body,
    error_from,
    status_of,
)
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer


@pytest.fixture(scope="module")
def url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real API server over a fresh SQLite store; the clients find its admin key in
    ``TOCSIN_API_KEY``, as a user's would."""
    base = tmp_path_factory.mktemp("client")
    store = SQLiteStore(base / "t.db", buckets=8)
    server = ApiServer(store).start()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TOCSIN_API_KEY", server.admin_key)
        yield server.url
    server.stop()
    store.close()


def test_sync_client(url: str, tmp_path: Path) -> None:
    with Client(url) as client:
        made = client.add_channel("sync", "file", {"path": str(tmp_path / "s.jsonl")})
        assert made == {"name": "sync", "tenant": "default", "kind": "file",
                        "config": {"path": made["config"]["path"]}}
        assert "sync" in {c["name"] for c in client.channels()}

        one = client.schedule("sync", {"x": 1}, delay=timedelta(minutes=5), headers={"h": "v"})
        assert one["status"] == "PENDING" and one["created"] is True
        got = client.get(one["id"])
        assert got["payload"] == {"x": 1} and got["headers"] == {"h": "v"}
        text = client.schedule("sync", payload_text="hi", delay="PT1M")
        raw = client.schedule("sync", payload_base64="AAE=", delay=60)
        assert client.get(text["id"])["payload_text"] == "hi"
        assert client.get(raw["id"])["payload_base64"] == "AAE="
        null = client.schedule("sync", None, delay=60)
        assert client.get(null["id"])["payload"] is None

        due = datetime(2033, 3, 1, 9, 30, tzinfo=timezone(timedelta(hours=1)))
        batch = client.schedule_many([{"channel": "sync", "payload": i, "due_at": due,
                                       "delay": None} for i in range(5)])
        assert [b["due_at"] for b in batch] == ["2033-03-01T08:30:00.000Z"] * 5

        listed = list(client.list_schedules(channel="sync", status="PENDING", page_size=2))
        assert len(listed) == 9 and [s["id"] for s in listed] == sorted(s["id"] for s in listed)
        ranged = client.list_schedules(channel="sync", due_from=due,
                                       due_to=due + timedelta(seconds=1))
        assert {s["id"] for s in ranged} == {b["id"] for b in batch}

        assert client.cancel(one["id"])["status"] == "CANCELLED"
        with pytest.raises(ConflictError) as late:
            client.cancel(one["id"])
        assert late.value.status == "CANCELLED" and late.value.ident == one["id"]
        assert client.deliveries(one["id"]) == []
        assert client.health() == {"status": "ready", "problems": []}

        client.delete_channel("sync")
        with pytest.raises(NotFoundError):
            client.delete_channel("sync")


def test_sync_client_errors(url: str, tmp_path: Path) -> None:
    with Client(url) as client:
        client.add_channel("errs", "file", {"path": str(tmp_path / "e.jsonl")})
        with pytest.raises(NotFoundError, match="missing"):
            client.get("missing")
        with pytest.raises(ValidationError) as unknown:
            client.schedule("nowhere", 1, delay=1)
        assert unknown.value.field == "channel" and "not registered" in unknown.value.reason
        with pytest.raises(ValidationError) as bad_batch:
            client.schedule_many([{"channel": "errs", "payload": 1, "delay": 5},
                                  {"channel": "errs", "payload": 1, "delay": -5}])
        assert bad_batch.value.errors == [{"index": 1, "field": "schedules.1.delay",
                                           "reason": "must not be negative"}]
        with pytest.raises(ValidationError) as past:
            client.schedule("errs", 1, due_at=datetime.now(UTC) - timedelta(hours=1))
        assert past.value.field == "due_at" and "grace window is 60 s" in past.value.reason
        with pytest.raises(ValidationError) as config:
            client.add_channel("k", "kafka", {})
        assert config.value.field.startswith("config.")

        first = client.schedule("errs", {"a": 1}, delay=30, key="once")
        again = client.schedule("errs", {"a": 1}, delay=30, key="once")
        assert again == first | {"created": False}
        with pytest.raises(ConflictError) as reused:
            client.schedule("errs", {"a": 2}, delay=30, key="once")
        assert first["id"] in str(reused.value)


def test_async_client(url: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        async with AsyncClient(url) as client:
            await client.add_channel("async", "file", {"path": str(tmp_path / "a.jsonl")})
            assert "async" in {c["name"] for c in await client.channels()}
            due = datetime.now(UTC) + timedelta(minutes=1)
            made = await client.schedule("async", payload_text="hi", due_at=due)
            assert (await client.get(made["id"]))["payload_text"] == "hi"
            batch = await client.schedule_many([{"channel": "async", "payload": i,
                                                 "delay": timedelta(hours=1)} for i in range(3)])
            seen = [s["id"] async for s in client.list_schedules(channel="async", page_size=2)]
            assert seen == sorted([made["id"], *(b["id"] for b in batch)])
            assert (await client.cancel(made["id"]))["status"] == "CANCELLED"
            with pytest.raises(ConflictError) as late:
                await client.cancel(made["id"])
            assert late.value.status == "CANCELLED"
            assert await client.deliveries(made["id"]) == []
            with pytest.raises(NotFoundError):
                await client.get("missing")
            with pytest.raises(ValidationError) as bad:
                await client.schedule("async", 1, delay="soon")
            assert bad.value.field == "delay"
            assert (await client.health())["status"] == "ready"
            await client.delete_channel("async")

    asyncio.run(scenario())


def _public(cls: type) -> dict[str, Any]:
    return {name: member for name, member in vars(cls).items()
            if not name.startswith("_") and callable(member)}


def test_every_async_method_is_awaitable_with_the_sync_signature() -> None:
    sync, aio = _public(Client), _public(AsyncClient)
    assert set(sync) - {"close"} == set(aio) - {"aclose"}
    assert len(aio) > 25
    for name, method in aio.items():
        if name == "list_schedules":  # iterates pages: an async generator, used with `async for`
            assert inspect.isasyncgenfunction(method)
            assert inspect.signature(method).parameters == inspect.signature(
                sync[name]).parameters
            continue
        assert inspect.iscoroutinefunction(method), name
        if name != "aclose":
            assert inspect.signature(method) == inspect.signature(sync[name]), name
        assert not inspect.iscoroutinefunction(sync.get(name, sync["close"])), name


def test_methods_read_as_written() -> None:
    sig = inspect.signature(Client.schedule)
    assert list(sig.parameters)[:3] == ["self", "channel", "payload"]
    assert sig.return_annotation == "Created"
    assert Client.firings.__doc__ and "skipped" in Client.firings.__doc__
    assert AsyncClient.get_policy.__name__ == "get_policy"


def _refusing() -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        raise AssertionError(f"nothing should be sent: {request.url}")

    return httpx.MockTransport(handler)


def test_naive_datetimes_are_refused_before_sending() -> None:
    naive = datetime(2030, 1, 1)  # noqa: DTZ001
    with Client("http://tocsin.test", transport=_refusing()) as client:
        with pytest.raises(ValidationError, match="naive") as refused:
            client.schedule("out", 1, due_at=naive)
        assert refused.value.field == "due_at"
        with pytest.raises(ValidationError, match="naive"):
            client.schedule_many([{"channel": "out", "payload": 1, "due_at": naive}])
        with pytest.raises(ValidationError, match="naive"):
            next(client.list_schedules(due_from=naive))
        with pytest.raises(ValidationError, match="naive"):
            client.reschedule("x", due_at=naive)


def test_unready_is_an_answer_not_an_error(tmp_path: Path) -> None:
    server = ApiServer(SQLiteStore(tmp_path / "u.db", buckets=4), expect_dispatcher=True).start()
    try:
        with Client(server.url) as client:
            health = client.health()
        assert health["status"] == "unready" and "dispatcher" in health["problems"][0]
    finally:
        server.stop()


@pytest.mark.parametrize(("status", "body", "error"), [
    (503, {"error": {"type": "StoreError", "message": "down"}}, StoreError),
    (404, {"error": {"type": "HTTPError", "message": "Not Found: GET /x"}}, NotFoundError),
    (500, "Internal Server Error", TocsinError),
    (418, {"error": {"type": "Teapot", "message": "short and stout"}}, TocsinError),
])
def test_error_statuses_map_to_tocsin_errors(status: int, body: object,
                                             error: type[TocsinError]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if isinstance(body, str):
            return httpx.Response(status, text=body)
        return httpx.Response(status, json=body)

    with Client("http://tocsin.test", transport=httpx.MockTransport(handler)) as client, \
            pytest.raises(error) as raised:
        client.get("x")
    assert type(raised.value) is error
    assert str(status) in str(raised.value) or status in (404, 503)


def test_recurring_and_policies_sync_and_async(url: str, tmp_path: Path) -> None:
    with Client(url) as client:
        client.add_channel("rc", "file", {"path": str(tmp_path / "rc.jsonl")})
        assert client.add_policy("rp", 3, token_lease=timedelta(seconds=30))["token_lease"] == 30
        start = datetime(2031, 10, 26, tzinfo=UTC)
        made = client.add_recurring("30 2 * * *", "rc", {"v": 1}, timezone="Europe/Berlin",
                                    start=start, stagger=timedelta(seconds=90), policy="rp",
                                    misfire="fire_all")
        assert (made["stagger"], made["misfire"], made["policy"]) == (90.0, "fire_all", "rp")
        # 26 Oct 2031 is Berlin's fall-back day: the fixed-time job fires once, at 02:30 CEST.
        assert client.next_firings(made["id"], 2) == [
            {"local": "2031-10-26T02:30:00+02:00", "utc": "2031-10-26T00:30:00Z"},
            {"local": "2031-10-27T02:30:00+01:00", "utc": "2031-10-27T01:30:00Z"}]
        changed = client.update_recurring(made["id"], count=4, headers={"h": "1"})
        assert (changed["count"], changed["headers"], changed["revision"]) == (4, {"h": "1"}, 1)
        assert client.firings(made["id"]) == []
        with pytest.raises(ConflictError):
            client.delete_policy("rp")
        with pytest.raises(ValidationError) as bad:
            client.add_recurring("* * * * *", "rc", 1, timezone="Nowhere/Atlantis")
        assert bad.value.field == "timezone"
        with pytest.raises(NotFoundError):
            client.release("no-such-delivery-1")

    async def run() -> None:
        async with AsyncClient(url) as aclient:
            assert (await aclient.pause_recurring(made["id"]))["state"] == "PAUSED"
            assert [p["name"] for p in await aclient.policies()] == ["rp"]
            await aclient.delete_recurring(made["id"])
            await aclient.delete_policy("rp")
            with pytest.raises(NotFoundError):
                await aclient.get_recurring(made["id"])

    asyncio.run(run())


@pytest.mark.parametrize("error", [
    ValidationError("delay", "must not be negative"),
    NotFoundError("schedule", "s-1"),
    ConflictError("too late", status="CLAIMED", ident="s-2"),
    StoreError("database is locked"),
])
def test_the_api_table_read_backwards_gives_the_same_error(error: TocsinError) -> None:
    back = error_from(status_of(error), error_body(error), path="/v1/x")
    assert type(back) is type(error) and str(back) == str(error)
    assert vars(back) == vars(error)


def test_the_clients_send_the_key_and_read_refusals_back(url: str, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    with Client(url, api_key="") as keyless, pytest.raises(AuthenticationError):
        keyless.channels()
    with Client(url, api_key="tsk_key_0000000000000000_" + "0" * 64) as forged, \
            pytest.raises(AuthenticationError, match="unknown or revoked"):
        forged.channels()
    with Client(url) as admin:
        key = admin.create_key("tenant", tenant="acme", read_only=True, name="ro")
        assert key["token"].startswith("tsk_") and key["role"] == "tenant"
        assert [k["id"] for k in admin.keys(tenant="acme")] == [key["id"]]
    with Client(url, api_key=key["token"]) as reader:
        assert reader.channels() == []
        with pytest.raises(ForbiddenError) as refused:
            reader.add_channel("nope", "file", {"path": str(tmp_path / "n.jsonl")})
        assert refused.value.field == "method"

    async def scenario() -> None:
        async with AsyncClient(url, api_key=key["token"]) as reader:
            assert await reader.channels() == []
            with pytest.raises(ForbiddenError):
                await reader.set_tenant("acme", durability="relaxed")

    asyncio.run(scenario())
    with Client(url) as admin:
        assert admin.revoke_key(key["id"])["revoked_at"] is not None
    monkeypatch.delenv("TOCSIN_API_KEY")
    monkeypatch.setenv("TOCSIN_HOME", str(tmp_path))
    with Client(url) as nobody, pytest.raises(AuthenticationError, match="no API key"):
        nobody.channels()


def test_a_cap_comes_back_as_quota_exceeded_with_its_wait() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == "Bearer tsk_given"
        return httpx.Response(429, headers={"retry-after": "7"}, json={"error": {
            "type": "QuotaExceededError", "message": "slow down", "retry_after": 7}})

    with Client("http://tocsin.test", api_key="tsk_given",
                transport=httpx.MockTransport(handler)) as client, \
            pytest.raises(QuotaExceededError) as raised:
        client.schedule("out", 1, delay=5)
    assert raised.value.retry_after_s == 7

"""The file channel: JSON lines, intact under concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from tests.channels.envelopes import envelopes
from tocsin.channels import build_channel, validate_channel_config
from tocsin.channels.file import default_path
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, PayloadKind


def _channel(path: Path) -> ChannelSpec:
    return ChannelSpec(name="c", kind=ChannelKind.FILE, config={"path": str(path)})


def test_writes_one_json_envelope_per_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    results = build_channel(_channel(path)).send(envelopes(3, headers={"x-trace": "t1"}))
    assert [r.outcome for r in results] == [Outcome.DELIVERED] * 3
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert lines[0] == {"v": 1, "schedule_id": "S00000", "delivery_id": "S00000-1", "attempt": 1,
                        "tenant": "default", "channel": "c", "due_at": "2027-01-15T08:00:00.000Z",
                        "key": None, "ordering_key": None, "headers": {"x-trace": "t1"},
                        "payload": {"n": 0}}
    assert [line["payload"]["n"] for line in lines] == [0, 1, 2]


def test_text_and_binary_payloads(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    base = envelopes(1)[0]
    text = base._replace(payload=b"line\nbreak", payload_kind=PayloadKind.TEXT)
    raw = base._replace(payload=b"\x00\xff", payload_kind=PayloadKind.BINARY)
    build_channel(_channel(path)).send([text, raw])
    first, second = (json.loads(line) for line in path.read_text().splitlines())
    assert first["payload"] == "line\nbreak"
    assert second["payload_base64"] == "AP8="


def _write(path: str, start: int) -> None:
    channel = build_channel(_channel(Path(path)))
    batch: list[Envelope] = [e._replace(schedule_id=f"P{start + i}")
                             for i, e in enumerate(envelopes(200))]
    for _ in range(10):
        channel.send(batch)


def test_concurrent_writer_processes_never_interleave_lines(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write, args=(str(path), k * 1000)) for k in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    lines = path.read_text().splitlines()
    assert len(lines) == 4 * 10 * 200
    assert all(json.loads(line)["v"] == 1 for line in lines)


def test_unwritable_path_is_retried(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where a directory should be: fixable, so retried
    channel = build_channel(_channel(blocker / "out.jsonl"))
    results = channel.send(envelopes(2))
    assert {r.outcome for r in results} == {Outcome.RETRY}


def _send_over_a_size_limit(path: str, limit: int) -> list[str]:
    import resource
    import signal

    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # an EFBIG error instead of a signal
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return [r.outcome.value for r in build_channel(_channel(Path(path))).send(envelopes(1000))]


def test_a_failed_write_leaves_no_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "out.jsonl"
    build_channel(_channel(path)).send(envelopes(10))
    before = path.read_bytes()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(1) as pool:  # a batch of some 200 kB written into a 64 kB limit
        outcomes = pool.apply(_send_over_a_size_limit, (str(path), 64 * 1024))
    assert set(outcomes) == {"retry"}
    assert path.read_bytes() == before


def test_default_path_is_under_tocsin_home(tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TOCSIN_FILE_ROOTS", raising=False)  # the default: home/channels
    monkeypatch.setenv("TOCSIN_HOME", str(tmp_path / "home"))
    channel = build_channel(ChannelSpec(name="alerts", kind=ChannelKind.FILE))
    channel.send(envelopes(1))
    assert (tmp_path / "home" / "channels" / "alerts.jsonl").read_text().count("\n") == 1
    monkeypatch.delenv("TOCSIN_HOME")
    monkeypatch.chdir(tmp_path)
    assert default_path("x") == tmp_path / ".tocsin" / "channels" / "x.jsonl"


def test_fsync_option(tmp_path: Path) -> None:
    config = validate_channel_config(ChannelKind.FILE, {"path": str(tmp_path / "o"),
                                                        "fsync": True})
    channel = build_channel(ChannelSpec(name="c", kind=ChannelKind.FILE, config=config))
    assert {r.outcome for r in channel.send(envelopes(3))} == {Outcome.DELIVERED}
    assert len((tmp_path / "o").read_text().splitlines()) == 3


def test_throughput_order_of_200k_a_second(tmp_path: Path) -> None:
    channel = build_channel(_channel(tmp_path / "out.jsonl"))
    batch = envelopes(10_000)
    start = time.perf_counter()
    for _ in range(10):
        channel.send(batch)
    rate = 100_000 / (time.perf_counter() - start)
    # about 100-200 k/s here, nearly all of it Envelope.to_json_bytes; a wide margin for CI
    assert rate > 30_000, f"{rate:.0f} envelopes/s"


def test_registration_stores_the_path_as_given() -> None:
    config = validate_channel_config(ChannelKind.FILE, {"path": "rel/out.jsonl"})
    assert config == {"path": "rel/out.jsonl"}  # nothing resolved on the caller's behalf

"""The file channel: JSON lines, intact under concurrent writers."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

from tests.channels.envelopes import envelopes
from tocsin.channels import build_channel, validate_channel_config
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
    blocker.write_text("")
    channel = build_channel(_channel(tmp_path / "out.jsonl"))
    channel.path = str(blocker / "out.jsonl")  # type: ignore[attr-defined]
    results = channel.send(envelopes(2))
    assert {r.outcome for r in results} == {Outcome.RETRY}


def test_registration_makes_the_path_absolute() -> None:
    config = validate_channel_config(ChannelKind.FILE, {"path": "rel/out.jsonl"})
    assert Path(config["path"]).is_absolute()

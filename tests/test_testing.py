"""The public test kit: its example works as written, and the old test-support paths still
import the moved helpers."""

from __future__ import annotations

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.testing import LocalDispatcher, ManualClock, Recordings, memory_store


def test_the_documented_example_runs() -> None:
    clock, recordings = ManualClock(), Recordings()
    store = memory_store()
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING,
                                  config={"fail": "retry", "fail_first": 1}))
    local = LocalDispatcher(store, clock=clock, recordings=recordings)
    [(made, _)] = store.create([NewSchedule(channel="out", payload=b"{}",
                                            due_ms=clock.now_ms())], now_ms=clock.now_ms())
    local.step()
    assert store.get(made.id).status is Status.PENDING and recordings.recorded("out") == []
    clock.advance(1_000)
    local.step()
    assert [e.attempt for e in recordings.recorded("out")] == [2]
    store.close()


def test_the_old_support_paths_re_export_the_moved_helpers() -> None:
    from tests.support import api_server, dispatch, processes, receiver
    from tocsin.testing import api_server as new_api_server
    from tocsin.testing import dispatch as new_dispatch
    from tocsin.testing import processes as new_processes
    from tocsin.testing import receiver as new_receiver

    assert receiver.Receiver is new_receiver.Receiver
    assert api_server.ApiServer is new_api_server.ApiServer
    assert dispatch.running_dispatcher is new_dispatch.running_dispatcher
    assert processes.start_tocsin is new_processes.start_tocsin

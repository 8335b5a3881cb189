"""The public test kit: its example works as written, and its helpers work."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from tocsin.domain import ChannelKind, ChannelSpec, NewSchedule, Status
from tocsin.testing import LocalDispatcher, ManualClock, Recordings, memory_store
from tocsin.testing.dispatch import wait_until


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


def test_run_steps_in_real_time_until_stopped(tmp_path: Path) -> None:
    from tocsin.clock import SystemClock
    from tocsin.stores.sqlite import SQLiteStore

    store, recordings, clock = SQLiteStore(tmp_path / "t.db", buckets=4), Recordings(), \
        SystemClock()
    store.put_channel(ChannelSpec(name="out", kind=ChannelKind.RECORDING))
    local = LocalDispatcher(store, clock=clock, recordings=recordings)
    stop = threading.Event()
    runner = threading.Thread(target=local.run, args=(stop,), kwargs={"interval_s": 0.01})
    runner.start()
    try:
        store.create([NewSchedule(channel="out", payload=b"{}", due_ms=clock.now_ms())],
                     now_ms=clock.now_ms())
        wait_until(lambda: recordings.recorded("out"), timeout_s=30, what="the delivery")
    finally:
        stop.set()
        runner.join(timeout=30)
    assert not runner.is_alive() and len(recordings.recorded("out")) == 1
    local.close()
    store.close()


def test_a_broker_whose_port_was_taken_starts_on_another(tmp_path: Path) -> None:
    """The port is picked free and bound by the broker later; taken in between, the broker
    exits and is started again on a fresh port."""
    import socket

    from tocsin.testing.tansu import Tansu

    broker = Tansu(tmp_path / "tansu.log")
    taken = broker.port
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", taken))
        holder.listen()
        broker.start()
        try:
            assert broker.port != taken and broker.bootstrap.endswith(f":{broker.port}")
            broker.create_topic("t", partitions=1)
        finally:
            broker.stop()


def test_the_tls_proxy_relays_to_a_client_that_trusts_its_ca_only() -> None:
    """A client trusting the CA, checking the host name (127.0.0.1 and localhost), reaches
    the plaintext server behind the proxy; one trusting another CA fails its handshake, which
    the proxy counts with its reason."""
    import socket
    import ssl

    from tocsin.testing.certificates import CertificateAuthority
    from tocsin.testing.tls_proxy import TlsProxy

    with socket.create_server(("127.0.0.1", 0)) as upstream:
        def echo() -> None:
            for _ in range(2):
                conn, _ = upstream.accept()
                with conn:
                    conn.sendall(conn.recv(100).upper())

        threading.Thread(target=echo, daemon=True).start()
        ca = CertificateAuthority.create()
        with TlsProxy(ca.issue(), upstream_port=upstream.getsockname()[1]) as proxy:
            for host in ("127.0.0.1", "localhost"):
                trusting = ssl.create_default_context(cadata=ca.cert_pem)
                with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as raw, \
                        trusting.wrap_socket(raw, server_hostname=host) as tls:
                    tls.sendall(b"hello")
                    assert tls.recv(100) == b"HELLO"
            other = ssl.create_default_context(cadata=CertificateAuthority.create().cert_pem)
            with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as raw, \
                    pytest.raises(ssl.SSLCertVerificationError, match="certificate verify failed"):
                other.wrap_socket(raw, server_hostname="127.0.0.1")
            wait_until(lambda: proxy.failures, timeout_s=10, what="the failure counted")
            assert proxy.handshakes == 2
            assert "unknown ca" in proxy.failures[0]

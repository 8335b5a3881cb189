"""The API's listening socket: its connections send a response at once (Nagle off).

Found by bench/labels.py: a response written in two sends (uvicorn writes the headers, then
the body) waited for the client's delayed ACK on a kept-alive connection, 44 ms a request
(``/healthz`` included), because asyncio turns Nagle off only on sockets that name
``IPPROTO_TCP``, and ``bind_api`` made its socket without it."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import httpx

from tocsin.cli.runner import bind_api
from tocsin.config import Settings
from tocsin.stores.sqlite import SQLiteStore
from tocsin.testing.api_server import ApiServer


def _nodelay_of_accepted(sock: socket.socket) -> int:
    """TCP_NODELAY of a connection an asyncio server (as uvicorn runs) accepts on ``sock``."""

    async def main() -> int:
        accepted: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            conn = writer.get_extra_info("socket")
            accepted.set_result(conn.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
            writer.close()

        server = await asyncio.start_server(on_connection, sock=sock)
        port = sock.getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            return await asyncio.wait_for(accepted, 10)
        finally:
            writer.close()
            server.close()

    return asyncio.run(main())


def test_the_apis_connections_have_nagle_off() -> None:
    sock = bind_api(Settings(api_host="127.0.0.1", api_port=0))
    assert _nodelay_of_accepted(sock) == 1


def test_the_test_kits_server_too(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "t.db", buckets=4)
    server = ApiServer(store).start()
    try:
        assert server._socket.proto == socket.IPPROTO_TCP
        with httpx.Client(base_url=server.url) as client:  # kept alive: answers each time
            assert [client.get("/healthz").status_code for _ in range(3)] == [200] * 3
    finally:
        server.stop()
        store.close()

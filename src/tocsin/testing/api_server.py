"""A real uvicorn server for the API, on a free loopback port, in a background thread."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import httpx
import uvicorn

from tocsin.abc import Store
from tocsin.api.app import create_app
from tocsin.apikeys.tokens import issue_key
from tocsin.config import Settings
from tocsin.domain import Role

__all__ = ["ApiServer", "free_port"]


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class ApiServer:
    """``create_app`` over ``store`` served by uvicorn until :meth:`stop`; ``admin_key`` is an
    admin key minted in ``store`` for it, ``headers`` the header that sends it."""

    def __init__(self, store: Store, settings: Settings | None = None, **app_kw: Any) -> None:
        self.store = store
        # Bound here and handed to uvicorn: no other socket can take the port in between.
        # IPPROTO_TCP named, as tocsin.cli.runner.bind_api does: asyncio then turns Nagle off.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.bind(("127.0.0.1", 0))
        self.port = int(self._socket.getsockname()[1])
        self.url = f"http://127.0.0.1:{self.port}"
        self.admin_key = issue_key(store, role=Role.ADMIN, name="tests", now_ms=0)[1]
        self.headers = {"authorization": f"Bearer {self.admin_key}"}
        app = create_app(settings or Settings(), store=store, **app_kw)
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run,
                                        kwargs={"sockets": [self._socket]}, daemon=True)

    def start(self) -> ApiServer:
        """Start and wait until ``/healthz`` answers."""
        self._thread.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.05)
        raise RuntimeError("the API server did not start")

    def stop(self) -> None:
        """Stop the server and wait for its thread."""
        self._server.should_exit = True
        self._thread.join(timeout=30)
        self._socket.close()

"""A TLS-terminating TCP proxy on loopback, for tests of clients that speak TLS to a server
that does not (the test kit's Kafka broker, tansu, speaks plaintext only): :class:`TlsProxy`.

It listens on ``127.0.0.1`` on a free port, completes a TLS handshake with each client using
the certificate it was given, then pipes the decrypted bytes to ``127.0.0.1:upstream_port``
and back. An asyncio loop in a daemon thread serves every connection; :meth:`TlsProxy.close`
stops it and drops them. It counts completed handshakes and keeps the reason of each failed
one, so a test can tell "no TLS was spoken" from "the client refused the certificate"::

    ca = CertificateAuthority.create()
    with TlsProxy(ca.issue(), upstream_port=server_port) as proxy:
        proxy.address            # "127.0.0.1:PORT": connect here with TLS, trusting ca
        proxy.handshakes         # completed handshakes so far
        proxy.failures           # each failed handshake's reason, in order
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import tempfile
import threading
from pathlib import Path
from types import TracebackType

from tocsin.testing.certificates import ServerCertificate

__all__ = ["TlsProxy"]

_HANDSHAKE_S = 10.0
"""A client that has not finished its handshake by then is dropped."""
_CHUNK = 64 * 1024


class TlsProxy:
    """TLS on ``127.0.0.1:port`` in front of plaintext on ``127.0.0.1:upstream_port`` (see the
    module docstring). ``upstream_port`` may be set after the proxy starts (the port a server
    started behind it got); a connection made while it is None is dropped after its
    handshake."""

    def __init__(self, certificate: ServerCertificate, *, upstream_port: int | None = None) -> None:
        self.upstream_port = upstream_port
        self.handshakes = 0
        """Handshakes completed so far."""
        self.failures: list[str] = []
        """Each failed handshake's reason (the TLS layer's words), in order."""
        self._context = _server_context(certificate)
        self._sock = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._sock.getsockname()[1]
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="tls-proxy", daemon=True)
        self._thread.start()
        self._ready.wait(10)

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``, where clients connect with TLS."""
        return f"127.0.0.1:{self.port}"

    def _run(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        server = loop.run_until_complete(asyncio.start_server(self._serve, sock=self._sock))
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            server.close()
            # a connection accepted just before the close starts its task on a later turn
            while pending := [t for t in asyncio.all_tasks(loop) if not t.done()]:
                for task in pending:
                    task.cancel()
                loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
            loop.run_until_complete(server.wait_closed())
            loop.close()

    async def _serve(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        # Cancelled only by close: the task ends quietly (asyncio 3.11 logs a connection
        # callback's cancelled task as an error).
        with contextlib.suppress(asyncio.CancelledError):
            try:
                await self._relay(client_in, client_out)
            finally:
                client_out.close()

    async def _relay(self, client_in: asyncio.StreamReader,
                     client_out: asyncio.StreamWriter) -> None:
        try:
            await client_out.start_tls(self._context, ssl_handshake_timeout=_HANDSHAKE_S)
        except (ssl.SSLError, OSError, TimeoutError) as exc:
            self.failures.append(str(exc) or type(exc).__name__)
            return
        self.handshakes += 1
        if self.upstream_port is None:
            return
        try:
            server_in, server_out = await asyncio.open_connection("127.0.0.1",
                                                                  self.upstream_port)
        except OSError:
            return
        pipes = [asyncio.ensure_future(_pipe(client_in, server_out)),
                 asyncio.ensure_future(_pipe(server_in, client_out))]
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for pipe in pipes:
                pipe.cancel()
            await asyncio.gather(*pipes, return_exceptions=True)
            server_out.close()

    def close(self) -> None:
        """Stop listening and drop every connection."""
        if self._thread.is_alive():
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)
        with contextlib.suppress(OSError):
            self._sock.close()

    def __enter__(self) -> TlsProxy:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


async def _pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    """Bytes from ``source`` to ``sink`` until ``source`` ends or either side fails."""
    with contextlib.suppress(OSError, ssl.SSLError):
        while data := await source.read(_CHUNK):
            sink.write(data)
            await sink.drain()


def _server_context(certificate: ServerCertificate) -> ssl.SSLContext:
    """A server-side context holding ``certificate`` (``ssl`` loads keys from files only:
    they are written to a private temporary folder and removed once loaded)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    with tempfile.TemporaryDirectory(prefix="tocsin-tls-") as folder:
        cert, key = certificate.write(Path(folder))
        context.load_cert_chain(cert, key)
    return context

"""The webhook receiver: Debian's nginx with its own configuration in a temporary directory, on
127.0.0.1 and a free port, one worker, answering ``return 200`` to every request, kept alive.
Its access log is the measurement: per request ``$msec`` (arrival, ms resolution), the path
(the phase), and the headers every sender sets — ``Tocsin-Schedule-Id``,
``Tocsin-Delivery-Id``, the Standard Webhooks ``webhook-id`` when present, ``Tocsin-Due-At``.

The senders (Tocsin's webhook channel, the Celery and APScheduler peers) all POST to
``<url>/<phase>`` with those headers, so one parser serves every target.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import httpx

from bench.common import Outcomes, free_port, stop_group
from bench.services import wait_until

__all__ = ["Receiver", "peer_request"]

_CONF = """\
{user}worker_processes 1;
daemon off;
master_process on;
pid {tmp}/nginx.pid;
error_log {tmp}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {tmp}/body; proxy_temp_path {tmp}/proxy;
    fastcgi_temp_path {tmp}/fastcgi; uwsgi_temp_path {tmp}/uwsgi; scgi_temp_path {tmp}/scgi;
    log_format bench '$msec $uri $http_tocsin_schedule_id $http_tocsin_delivery_id '
                     '$http_webhook_id $http_tocsin_due_at';
    keepalive_requests 10000000;
    keepalive_timeout 600s;
    server {{
        listen 127.0.0.1:{port};
        location / {{
            access_log {tmp}/access.log bench buffer=256k flush=200ms;
            return 200;
        }}
    }}
}}
"""


class Receiver:
    """nginx, started by :meth:`start` and stopped by PID; reads its access log as it grows."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp / "nginx"
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = self.tmp / "access.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self._offset = 0
        self._first: dict[str, tuple[int, int]] = {}
        """schedule id -> (arrival ms, due ms) of its first arrival."""
        self._phase_of: dict[str, str] = {}
        self._repeats: dict[str, int] = defaultdict(int)
        self._new_delivery_id: dict[str, int] = defaultdict(int)
        self._delivery: dict[str, str] = {}

    def start(self) -> Receiver:
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        if not Path(nginx).exists():
            raise RuntimeError("nginx is not installed: bench/setup.sh")
        # as root nginx would hand its workers to 'nobody'; stay the user running the bench
        user = f"user {pwd.getpwuid(os.getuid()).pw_name};\n" if os.getuid() == 0 else ""
        conf = self.tmp / "nginx.conf"
        conf.write_text(_CONF.format(user=user, tmp=self.tmp, port=self.port))
        with (self.tmp / "stderr.log").open("ab") as sink:
            self.proc = subprocess.Popen([nginx, "-p", str(self.tmp), "-c", str(conf),
                                          "-e", str(self.tmp / "error.log")],
                                         stdout=sink, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        wait_until(lambda: httpx.get(self.url + "/ping", timeout=1).status_code == 200,
                   self.proc, "nginx", timeout_s=30)
        return self

    def stop(self) -> None:
        if self.proc is not None:
            stop_group(self.proc, grace_s=10)

    def _read(self) -> None:
        if not self.log.exists():
            return
        with self.log.open("rb") as f:
            f.seek(self._offset)
            data = f.read()
        complete = data.rfind(b"\n") + 1
        self._offset += complete
        for line in data[:complete].decode(errors="replace").splitlines():
            fields = line.split(" ")
            if len(fields) != 6 or fields[2] == "-" or fields[5] == "-":
                continue  # not a delivery (the start-up probe)
            msec, uri, sid, did, wid, due = fields
            arrived = int(float(msec) * 1000)
            did = did if did != "-" else wid
            if sid in self._first:
                self._repeats[self._phase_of[sid]] += 1
                if self._delivery[sid] != did:
                    self._new_delivery_id[self._phase_of[sid]] += 1
                continue
            due_ms = int(datetime.fromisoformat(due.replace("Z", "+00:00")).timestamp() * 1000)
            self._first[sid] = (arrived, due_ms)
            self._phase_of[sid] = uri.strip("/")
            self._delivery[sid] = did

    def delivered_total(self) -> int:
        """Distinct schedules received so far, over every phase."""
        self._read()
        return len(self._first)

    def outcomes(self, phase: str) -> Outcomes:
        """Arrival and due time of each schedule first received on ``/<phase>``; repeats (the
        same schedule again) and repeats under a new delivery id (a receiver deduplicating by
        delivery id would take them twice) counted apart."""
        self._read()
        due, done = [], []
        for sid, (arrived, due_ms) in self._first.items():
            if self._phase_of[sid] == phase:
                due.append(due_ms)
                done.append(arrived)
        return Outcomes(due_ms=due, done_ms=done, extra={
            "receiver": "nginx", "repeated_deliveries": self._repeats.get(phase, 0),
            "repeats_with_new_delivery_id": self._new_delivery_id.get(phase, 0)})


def peer_request(phase: str, n: int, due_ms: int) -> tuple[str, bytes, dict[str, str]]:
    """What a peer POSTs for message ``n`` of ``phase``: the path, the body Tocsin's webhook
    channel sends (its envelope, payload ``{"n": n}``) and the headers it sets."""
    from tocsin.domain import Envelope, PayloadKind

    sid = f"{phase}-{n}"
    env = Envelope(schedule_id=sid, delivery_id=f"{sid}-1", attempt=1, epoch=0,
                   tenant="default", channel=f"bench-{phase}", payload=b'{"n":%d}' % n,
                   payload_kind=PayloadKind.JSON, due_ms=due_ms)
    return f"/{phase}", env.to_json_bytes(), {**env.transport_headers(),
                                               "Content-Type": "application/json"}

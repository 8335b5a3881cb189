"""Redis Streams channel (redis-py; ``XADD``, pipelined). ``pip install 'tocsin[redis]'``.

Config: ``url`` (required: ``redis://[user:password@]host[:port][/db]`` or ``rediss://`` for
TLS with the system's CAs; no query options; the password is shown as ``***``), ``stream``
(required: the stream's key), ``maxlen`` (optional: trim the stream to about this many entries,
``XADD MAXLEN ~``), ``dedup_seconds`` (default 0, off: when set, each delivery id is
remembered that long beside the stream and a repeat of it is not added again, atomically, in
one script call), ``timeout`` seconds (default 10: connect and the batch's one round trip, at
most the operator's ``send_timeout_max_seconds``). The URL's host passes the destination
policy's broker check (``broker_allow``, docs/security.md) when registered and when built.

A batch is one pipeline, one round trip. Each entry's fields: ``envelope`` (the JSON of
:meth:`~tocsin.domain.Envelope.to_json_bytes`) and :meth:`~tocsin.domain.Envelope.transport_headers`
(``Tocsin-Delivery-Id``... and the schedule's own); a consumer group drops repeats by
``Tocsin-Delivery-Id`` (or lets ``dedup_seconds`` do it).

Outcomes: an added entry (or, with ``dedup_seconds``, a repeat already there) is DELIVERED;
anything else (no server, a timeout, an error reply such as ``WRONGTYPE`` or ``OOM``) is RETRY.
redis-py's own retries are off: Tocsin retries.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from tocsin.abc import Channel
from tocsin.channels import client_library
from tocsin.channels.limits import SendLimits, current_limits
from tocsin.channels.options import check_seconds, server_url
from tocsin.channels.policy import DestinationPolicy, current_policy
from tocsin.domain import ChannelKind, ChannelSpec, Envelope, Outcome, Result
from tocsin.errors import ValidationError

__all__ = ["DEDUP_PREFIX", "RedisStreamsChannel", "RedisStreamsConfig"]

DEDUP_PREFIX = "tocsin-dedup:"
"""With ``dedup_seconds``, a delivery id is remembered at ``<stream>:tocsin-dedup:<id>``."""
_ADD_ONCE = """
if redis.call('SET', KEYS[2], '1', 'NX', 'EX', ARGV[1]) then
  return redis.call('XADD', KEYS[1], unpack(ARGV, 2))
end
return false
"""
"""Add the entry unless its delivery id was added within ``dedup_seconds`` (one atomic call)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RedisStreamsConfig:
    """A Redis Streams channel's configuration."""

    url: str
    """``redis://`` or ``rediss://`` URL of the server and database."""
    stream: str
    """The stream's key."""
    maxlen: int | None = None
    """Trim the stream to about this many entries (``MAXLEN ~``)."""
    dedup_seconds: int = 0
    """How long a delivery id is remembered so a repeat is not added again (0: off)."""
    timeout: float = 10.0
    """Seconds one send may take; capped by the operator's send limits."""

    def check(self) -> None:
        """Reject what cannot work."""
        parts = server_url(self.url, ("redis", "rediss"), what="a redis:// or rediss:// URL")
        if parts.query or parts.fragment:  # redis-py reads TLS files and more from the query
            raise ValidationError("config.url", "takes no query options")
        db = parts.path.strip("/")
        if db and not db.isdigit():
            raise ValidationError("config.url", f"database {db!r} is not a number")
        if not self.stream or len(self.stream) > 1024:
            raise ValidationError("config.stream", "must be 1 to 1024 characters")
        if self.maxlen is not None and self.maxlen < 1:
            raise ValidationError("config.maxlen", "must be at least 1")
        if not 0 <= self.dedup_seconds <= 30 * 86400:
            raise ValidationError("config.dedup_seconds", "must be 0 to 2592000 (30 days)")
        check_seconds(self.timeout, "config.timeout")

    def admit(self, policy: DestinationPolicy) -> None:
        """Refuse a server the policy's broker check refuses (stored as given otherwise)."""
        from tocsin.channels.addresses import check_broker

        # the host urllib reads, as redis-py does
        check_broker(urlsplit(self.url).hostname or "", policy, field="config.url")


def fields(env: Envelope) -> dict[str, bytes | str]:
    """The fields of ``env``'s stream entry."""
    return {**env.transport_headers(), "envelope": env.to_json_bytes()}


class RedisStreamsChannel(Channel):
    """Adds each envelope to the stream; a batch is one pipelined round trip."""

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(RedisStreamsConfig, spec.config)
        self.config.admit(policy or current_policy())  # again: registered under another policy
        self.timeout_s = (limits or current_limits()).timeout(self.config.timeout)
        redis = client_library(ChannelKind.REDIS_STREAMS)
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # connecting and answering share the deadline: half each
        self._client: Any = redis.Redis.from_url(
            self.config.url, socket_timeout=self.timeout_s / 2,
            socket_connect_timeout=self.timeout_s / 2, retry=Retry(NoBackoff(), 0),
            retry_on_timeout=False, max_connections=4, health_check_interval=0)
        self._add_once: Any = self._client.register_script(_ADD_ONCE)
        self._errors = (redis.RedisError, OSError)
        self._lock = threading.Lock()

    def _queue(self, pipe: Any, env: Envelope) -> None:
        cfg = self.config
        if not cfg.dedup_seconds:
            pipe.xadd(cfg.stream, fields(env), maxlen=cfg.maxlen, approximate=True)
            return
        args: list[Any] = [cfg.dedup_seconds]
        if cfg.maxlen is not None:
            args += ["MAXLEN", "~", cfg.maxlen]
        args.append("*")
        for name, value in fields(env).items():
            args += [name, value]
        self._add_once(keys=[cfg.stream, f"{cfg.stream}:{DEDUP_PREFIX}{env.delivery_id}"],
                       args=args, client=pipe)

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if not envelopes:
            return []
        with self._lock:
            try:
                pipe = self._client.pipeline(transaction=False)
                for env in envelopes:
                    self._queue(pipe, env)
                answers = pipe.execute(raise_on_error=False)
            except self._errors as exc:
                error = f"redis: {type(exc).__name__}: {exc}"[:300]
                return [Result(e.delivery_id, Outcome.RETRY, error) for e in envelopes]
        return [Result(env.delivery_id, Outcome.RETRY, f"redis: {answer}"[:300])
                if isinstance(answer, Exception) else Result(env.delivery_id, Outcome.DELIVERED)
                for env, answer in zip(envelopes, answers, strict=True)]

    def close(self) -> None:
        with self._lock:
            self._client.close()

"""Amazon SQS channel (boto3; standard and FIFO queues, any SQS-protocol service).
``pip install 'tocsin[sqs]'``.

Config: ``queue_url`` (required: ``https://sqs.<region>.amazonaws.com/<account>/<name>``; a
name ending ``.fifo`` is a FIFO queue), ``region`` (default: read from an AWS queue URL, else
``us-east-1``), ``endpoint_url`` (default: the queue URL's scheme and host: where requests go),
``access_key_id``, ``secret_access_key``, ``session_token`` (default: boto3's own chain, the
dispatcher's environment or instance role; the secret and the token are write-only and shown as
``***``), ``timeout`` seconds (default 10: the whole send, at most the operator's
``send_timeout_max_seconds``), ``concurrency`` (default 10: requests of one send in flight at
once, 1 to 64). The endpoint's host passes the destination policy's broker
check (``broker_allow``, docs/security.md) when registered and when built.

Each batch goes out as ``SendMessageBatch`` requests of up to 10 messages and 256 KiB, up to
``concurrency`` of them at once (the dispatcher hands a destination one chunk of up to 1 000
rows at a time: 100 requests one after the other would need each answered within 50 ms to fit
in half the 10 s timeout). The requests are spread over ``concurrency`` lanes, each sent in order
by a thread of the channel's own (``tocsin-sqs-N``, ended by :meth:`SQSChannel.close`); on a
FIFO queue all the messages of one group go in one lane, in the batch's order. The
body is :meth:`~tocsin.domain.Envelope.to_json_bytes` as text; Tocsin's headers (and the
schedule's, while SQS's 10 attributes allow, by name order, names SQS accepts) are ``String``
message attributes. On a FIFO queue the ``MessageGroupId`` is the schedule's ordering key
(else its key, else its id: a group of its own) and the ``MessageDeduplicationId`` is the
delivery id, so SQS drops a repeat of one delivery within its 5-minute window.

Deadlines: botocore makes one attempt (Tocsin retries), each request's connect and read
timeouts are a quarter of the send's timeout, and no request starts in the last half, so a send
ends within its timeout. Outcomes: an entry SQS accepted is DELIVERED; one it refused as the
sender's fault (too large, characters SQS does not take: a request refused for its content is
tried again one message at a time, to find which) is REJECTED; anything else (the
service unreachable, throttled, the queue missing, credentials refused) is RETRY. On a FIFO
queue, once a group's message is not accepted its later messages in the send are RETRY unsent,
so a key's order holds.

    threads: tocsin-sqs-N (at most ``concurrency`` per channel, made as needed)
"""

from __future__ import annotations

import concurrent.futures
import re
import time
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

__all__ = ["SQSChannel", "SQSConfig"]

MAX_ENTRIES = 10
"""Messages per ``SendMessageBatch`` (SQS's limit)."""
MAX_BATCH_BYTES = 256 * 1024
"""Bytes of bodies and attributes per request (SQS's historical limit, which every
SQS-protocol service takes)."""
MAX_ATTRIBUTES = 10
"""Message attributes per message (SQS's limit)."""
MAX_CONCURRENCY = 64
"""The most requests of one send a channel may have in flight (``concurrency``)."""
PERMANENT = frozenset({"BatchRequestTooLong", "InvalidMessageContents", "MessageTooLong",
                       "InvalidParameterValue", "InvalidAttributeName", "InvalidAttributeValue"})
"""Error codes of a whole request that the content of its messages caused: a request of one
message is REJECTED; a request of several is tried again one message at a time."""
Request = list[tuple[Envelope, dict[str, Any]]]
"""One ``SendMessageBatch``: its envelopes, each with its entry."""
_ATTRIBUTE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,256}")
_AWS_HOST = re.compile(r"sqs[.-]([a-z0-9-]+)\.amazonaws\.com(\.cn)?$")


@dataclass(frozen=True, kw_only=True, slots=True)
class SQSConfig:
    """An SQS channel's configuration."""

    queue_url: str
    """The queue's URL; a name ending ``.fifo`` is a FIFO queue."""
    region: str | None = None
    """The AWS region (default: the queue URL's, else ``us-east-1``)."""
    endpoint_url: str | None = None
    """Where requests go (default: the queue URL's scheme and host)."""
    access_key_id: str | None = None
    """An access key id; with ``secret_access_key``, instead of boto3's credential chain."""
    secret_access_key: str | None = None
    """The access key's secret (write-only)."""
    session_token: str | None = None
    """A session token of temporary credentials (write-only)."""
    timeout: float = 10.0
    """Seconds one send may take; capped by the operator's send limits."""
    concurrency: int = 10
    """``SendMessageBatch`` requests of one send in flight at once (1 to 64)."""

    @property
    def fifo(self) -> bool:
        """Whether the queue is a FIFO queue."""
        return urlsplit(self.queue_url).path.rstrip("/").endswith(".fifo")

    @property
    def endpoint(self) -> str:
        """Where requests go."""
        if self.endpoint_url:
            return self.endpoint_url
        parts = urlsplit(self.queue_url)
        return f"{parts.scheme}://{parts.netloc}"

    @property
    def region_name(self) -> str:
        """The region requests are signed for."""
        if self.region:
            return self.region
        found = _AWS_HOST.search(urlsplit(self.queue_url).hostname or "")
        return found.group(1) if found else "us-east-1"

    def check(self) -> None:
        """Reject what cannot work."""
        for name in ("queue_url", "endpoint_url"):
            url = getattr(self, name)
            if url is None:
                continue
            parts = server_url(url, ("http", "https"), what="an http(s) URL",
                               field=f"config.{name}")
            if parts.username or parts.password or parts.query or parts.fragment:
                raise ValidationError(f"config.{name}",
                                      "takes no credentials, query or fragment")
        if not urlsplit(self.queue_url).path.strip("/"):
            raise ValidationError("config.queue_url", "names no queue (…/<account>/<name>)")
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValidationError("config.secret_access_key",
                                  "is given with access_key_id, or neither is")
        if self.session_token is not None and self.access_key_id is None:
            raise ValidationError("config.session_token", "needs access_key_id")
        if self.region is not None and not re.fullmatch(r"[a-z0-9-]{1,40}", self.region):
            raise ValidationError("config.region", f"{self.region!r} is not a region name")
        check_seconds(self.timeout, "config.timeout")
        if not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise ValidationError("config.concurrency",
                                  f"must be between 1 and {MAX_CONCURRENCY}")

    def admit(self, policy: DestinationPolicy) -> None:
        """Refuse an endpoint the policy's broker check refuses (stored as given otherwise)."""
        from tocsin.channels.addresses import check_broker

        field = "config.endpoint_url" if self.endpoint_url else "config.queue_url"
        # the host urllib reads, as botocore does (not yarl's reading of the text)
        check_broker(urlsplit(self.endpoint).hostname or "", policy, field=field)


def attributes(env: Envelope) -> dict[str, dict[str, str]]:
    """The message attributes of ``env``: Tocsin's headers, then the schedule's by name, while
    SQS's limit allows and the name is one SQS takes."""
    headers = env.transport_headers()
    own = [n for n in headers if n.startswith("Tocsin-")]
    names = own + sorted(n for n in headers if n not in own and _ATTRIBUTE_NAME.fullmatch(n)
                         and not n.lower().startswith(("aws.", "amazon.")))
    return {n: {"DataType": "String", "StringValue": headers[n]}
            for n in names[:MAX_ATTRIBUTES] if headers[n]}


class SQSChannel(Channel):
    """Sends each batch as ``SendMessageBatch`` requests of up to 10 messages."""

    def __init__(self, spec: ChannelSpec, *, policy: DestinationPolicy | None = None,
                 limits: SendLimits | None = None) -> None:
        from tocsin.channels.config import parse_config

        self.spec = spec
        self.config = parse_config(SQSConfig, spec.config)
        self.config.admit(policy or current_policy())  # again: registered under another policy
        self.timeout_s = (limits or current_limits()).timeout(self.config.timeout)
        boto3 = client_library(ChannelKind.SQS)
        from botocore.config import Config

        per_request = self.timeout_s / 4
        cfg = self.config
        self._client: Any = boto3.session.Session().client(
            "sqs", region_name=cfg.region_name, endpoint_url=cfg.endpoint,
            aws_access_key_id=cfg.access_key_id, aws_secret_access_key=cfg.secret_access_key,
            aws_session_token=cfg.session_token,
            config=Config(connect_timeout=per_request, read_timeout=per_request,
                          retries={"total_max_attempts": 1},
                          max_pool_connections=cfg.concurrency, tcp_keepalive=True))
        self._pool = concurrent.futures.ThreadPoolExecutor(cfg.concurrency,
                                                           thread_name_prefix="tocsin-sqs")

    def _entry(self, i: int, env: Envelope) -> dict[str, Any]:
        entry: dict[str, Any] = {"Id": str(i), "MessageBody": env.to_json_bytes().decode(),
                                 "MessageAttributes": attributes(env)}
        if self.config.fifo:
            entry["MessageGroupId"] = _group(env)
            entry["MessageDeduplicationId"] = env.delivery_id
        return entry

    def _requests(self, lane: Sequence[tuple[int, Envelope]]) -> list[Request]:
        """The lane's envelopes (with their place in the batch, for the entry ids) cut into
        requests of at most 10 entries and 256 KiB, in order."""
        out: list[Request] = []
        size = 0
        for i, env in lane:
            entry = self._entry(i, env)
            n = len(entry["MessageBody"].encode()) + sum(
                len(k) + len(v["StringValue"]) + 6 for k, v in entry["MessageAttributes"].items())
            if not out or len(out[-1]) == MAX_ENTRIES or size + n > MAX_BATCH_BYTES:
                out.append([])
                size = 0
            out[-1].append((env, entry))
            size += n
        return out

    def _lanes(self, envelopes: Sequence[Envelope]) -> list[list[Request]]:
        """The batch's requests spread over at most ``concurrency`` lanes, each to be sent in
        order: on a FIFO queue a message group's envelopes all go in one lane (the groups
        dealt out in the order they first appear), else the requests are dealt out in turn."""
        k = self.config.concurrency
        if not self.config.fifo:
            requests = self._requests(list(enumerate(envelopes)))
            return [requests[i::k] for i in range(min(k, len(requests)))]
        lane_of: dict[str, int] = {}
        lanes: list[list[tuple[int, Envelope]]] = [[] for _ in range(k)]
        for i, env in enumerate(envelopes):
            lane = lane_of.setdefault(_group(env), len(lane_of) % k)
            lanes[lane].append((i, env))
        return [self._requests(lane) for lane in lanes if lane]

    def send(self, envelopes: Sequence[Envelope]) -> list[Result]:
        if not envelopes:
            return []
        deadline = time.monotonic() + self.timeout_s / 2  # no request starts past it
        results: dict[str, Result] = {}
        try:
            lanes = [self._pool.submit(self._send_lane, lane, deadline)
                     for lane in self._lanes(envelopes)]
        except RuntimeError:  # the pool is shut: the channel was closed
            return [Result(e.delivery_id, Outcome.RETRY, "sqs: the channel is closed")
                    for e in envelopes]
        for lane in lanes:  # each ends within the timeout: no request starts past the deadline
            results.update(lane.result())
        return [results[e.delivery_id] for e in envelopes]

    def _send_lane(self, lane: list[Request], deadline: float) -> dict[str, Result]:
        """A lane's requests, one after the other: a Result for each of its envelopes."""
        results: dict[str, Result] = {}
        stopped: set[str] = set()  # FIFO groups with a message not accepted
        for request in lane:
            held = [(e, x) for e, x in request if x.get("MessageGroupId") in stopped]
            for env, _ in held:
                results[env.delivery_id] = Result(
                    env.delivery_id, Outcome.RETRY,
                    "sqs: an earlier message of its group was not accepted")
            request = [(e, x) for e, x in request if (e, x) not in held]
            if not request:
                continue
            if time.monotonic() > deadline:
                for env, _ in request:
                    results[env.delivery_id] = Result(
                        env.delivery_id, Outcome.RETRY,
                        f"sqs: not sent within {self.timeout_s} s")
                continue
            self._post(request, results)
            for env, entry in request:
                if results[env.delivery_id].outcome is not Outcome.DELIVERED and \
                        "MessageGroupId" in entry:
                    stopped.add(entry["MessageGroupId"])
        return results

    def _post(self, request: Request, results: dict[str, Result]) -> None:
        """One ``SendMessageBatch``; a Result for each of its envelopes in ``results``."""
        by_id = {entry["Id"]: env for env, entry in request}
        try:
            answer = self._client.send_message_batch(
                QueueUrl=self.config.queue_url, Entries=[entry for _, entry in request])
        except Exception as exc:  # an answer for every envelope, whatever went wrong
            error = _error(exc)
            if _code(exc) in PERMANENT:
                if len(request) > 1:
                    for one in request:
                        self._post([one], results)
                    return
                env = request[0][0]
                results[env.delivery_id] = Result(env.delivery_id, Outcome.REJECTED, error)
                return
            for env in by_id.values():
                results[env.delivery_id] = Result(env.delivery_id, Outcome.RETRY, error)
            return
        for ok in answer.get("Successful", ()):
            env = by_id.pop(ok["Id"])
            results[env.delivery_id] = Result(env.delivery_id, Outcome.DELIVERED)
        for failed in answer.get("Failed", ()):
            env = by_id.pop(failed["Id"])
            outcome = Outcome.REJECTED if failed.get("SenderFault") else Outcome.RETRY
            results[env.delivery_id] = Result(
                env.delivery_id, outcome,
                f"sqs: {failed.get('Code', 'failed')}: {failed.get('Message', '')}"[:300])
        for env in by_id.values():  # neither: never expected, never lost
            results[env.delivery_id] = Result(env.delivery_id, Outcome.RETRY,
                                              "sqs: no answer for this entry")

    def close(self) -> None:
        self._pool.shutdown(wait=True)  # the sends under way end first (within their timeout)
        self._client.close()


def _group(env: Envelope) -> str:
    """The FIFO message group of ``env``: its ordering key, else its key, else its id."""
    return env.ordering_key or env.key or env.schedule_id


def _code(exc: Exception) -> str:
    """A service error's code without its ``AWS.SimpleQueueService.`` prefix (``""``: none)."""
    response = getattr(exc, "response", None)
    if not isinstance(response, dict):
        return ""
    error = response.get("Error", {})
    code = str(error.get("QueryErrorCode") or error.get("Code") or "")
    return code.rsplit(".", 1)[-1]


def _error(exc: Exception) -> str:
    """A request's failure, without the service's full text (which may echo the request)."""
    response = getattr(exc, "response", None)
    if isinstance(response, dict):
        code = response.get("Error", {}).get("Code", "error")
        status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return f"sqs: {code}" + (f" (HTTP {status})" if status else "")
    return f"sqs: {type(exc).__name__}"

"""The HTTP edge's request models: validated here, once, into the domain's values (the
parsing itself is in :mod:`tocsin.validation.parsing`, the answers in :mod:`tocsin.api.views`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, JsonValue

from tocsin.domain import TENANT_NAME, MisfirePolicy, NewSchedule
from tocsin.domain.headers import headers_problem
from tocsin.domain.labels import check_labels
from tocsin.domain.terms import BodyFormat, WebhookMethod
from tocsin.errors import ValidationError
from tocsin.validation.parsing import canonical_digest, check_message_size, due_of, payload_of
from tocsin.validation.terms import TERMS_FIELDS, RetryIn, terms_from

__all__ = [
    "TENANT_PATTERN",
    "ChannelIn",
    "Delay",
    "PolicyIn",
    "RecurringChange",
    "RecurringIn",
    "ScheduleBatchIn",
    "ScheduleChange",
    "ScheduleIn",
    "TenantName",
]

_KEY_MAX = 256

TENANT_PATTERN = f"^{TENANT_NAME}$"
"""What a tenant name may be (:data:`tocsin.domain.TENANT_NAME`; pydantic's ``$`` is the end of
the text, as RE2's)."""

TenantName = Annotated[str | None, Field(
    min_length=1, max_length=64, pattern=TENANT_PATTERN,
    description="Admin keys: the tenant (default `default`); a tenant key may name only its "
                "own.")]
"""The ``tenant`` a body may name (see :func:`tocsin.api.auth.tenant_for`)."""


def _no_bool(value: Any) -> Any:
    """Refuse JSON ``true``/``false`` where a number is meant (pydantic would read 1 or 0)."""
    if isinstance(value, bool):
        raise ValueError("must be a number of seconds or an ISO 8601 duration, not a boolean")
    return value


Delay = Annotated[float | str | None, BeforeValidator(_no_bool)]
"""A delay: seconds, or an ISO 8601 duration; never a boolean."""


def _sendable(headers: dict[str, str]) -> dict[str, str]:
    """Refuse headers no message may carry (:func:`tocsin.domain.headers.header_problem`)."""
    if (why := headers_problem(headers)) is not None:
        raise ValueError(why)
    return headers


Headers = Annotated[dict[str, str], AfterValidator(_sendable)]
"""A message's headers: HTTP tokens for names, no CR/LF/NUL in values, none that frames the
request (``Host``, ``Content-Length``, ``Transfer-Encoding``, hop-by-hop) or that Tocsin
writes (``Tocsin-*``, ``webhook-*``)."""


class ScheduleIn(BaseModel):
    """One schedule as a client sends it."""

    model_config = ConfigDict(extra="forbid")

    channel: str = Field(min_length=1, max_length=128)
    payload: JsonValue = None
    payload_text: str | None = None
    payload_base64: str | None = None
    headers: Headers = Field(default_factory=dict)
    due_at: str | None = Field(None, description="RFC 3339 with an offset.")
    delay: Delay = Field(None, description="Seconds or an ISO 8601 duration.")
    key: str | None = Field(None, min_length=1, max_length=_KEY_MAX)
    tenant: TenantName = None
    ordering_key: str | None = Field(None, min_length=1, max_length=_KEY_MAX)
    uniqueness_key: str | None = Field(
        None, min_length=1, max_length=_KEY_MAX,
        description="Makes the task key (ordering_key, due time, uniqueness_key).")
    key_mode: Literal["idempotent", "task"] = Field(
        "idempotent", description="idempotent: a repeat with another body is 409; task: a "
                                  "repeat overwrites while pending.")
    policy: str | None = Field(None, min_length=1, max_length=128,
                               description="A throttling policy whose tokens it takes.")
    expires_at: str | None = Field(
        None, description="RFC 3339 with an offset: not sent at or after this instant (it "
                          "becomes EXPIRED). After the due time.")
    max_lateness: Delay = Field(
        None, description="Not sent this long or more after its due time (seconds or ISO "
                          "8601 duration; it becomes EXPIRED). Default: the channel's "
                          "max_lateness.")
    retry: RetryIn | None = Field(
        None, description="This schedule's retry policy (over its channel's and the "
                          "dispatcher's).")
    body: BodyFormat | None = Field(
        None, description="The delivery's body: envelope (Tocsin's JSON envelope), raw (the "
                          "payload alone), cloudevents_binary or cloudevents_structured. "
                          "Default: the channel's (webhook, Kafka, RabbitMQ, file).")
    method: WebhookMethod | None = Field(
        None, description="A webhook's HTTP method (POST, PUT, PATCH, DELETE). Default: the "
                          "channel's.")
    path: str | None = Field(
        None, max_length=2048,
        description="A path and query appended to the webhook channel's URL (starts with / "
                    "or ?; the origin stays the channel's).")
    labels: dict[str, str] = Field(
        default_factory=dict, description="Up to 16 key=value pairs to find it by (keys and "
                                          "values of letters, digits, '.', '_', '-', '/').")

    def to_domain(self, *, tenant: str, now_ms: int, max_payload: int, grace_ms: int,
                  key_retention_ms: int = 7 * 86_400_000) -> NewSchedule:
        """Validate the cross-field rules and build the domain value, in ``tenant`` (the one
        the caller's key acts for)."""
        payload = payload_of(self, max_payload=max_payload)
        if payload is None:
            raise ValidationError("payload", "give exactly one of payload, payload_text, "
                                             "payload_base64 (got none)")
        kind, data = payload
        check_message_size(data, self.headers, limit=max_payload)
        check_labels(self.labels)
        due_ms = due_of(self.due_at, self.delay, now_ms=now_ms, grace_ms=grace_ms)
        if due_ms is None:
            raise ValidationError("due_at", "give exactly one of due_at or delay")
        key, task = self.key, self.key_mode == "task"
        if self.uniqueness_key is not None:
            if key is not None:
                raise ValidationError("uniqueness_key", "give key or uniqueness_key, not both")
            key, task = f"task:{self.ordering_key or ''}:{due_ms}:{self.uniqueness_key}", True
        terms = terms_from(expires_at=self.expires_at, max_lateness=self.max_lateness,
                           retry=self.retry, due_ms=due_ms, body=self.body,
                           method=self.method, path=self.path)
        # The request's digest tells a true repeat of a key from a reuse: only keys need it.
        # Terms and labels not given are left out, so a request digests as it did before
        # they existed.
        digest = (canonical_digest(
            {k: v for k, v in self.model_dump(mode="json").items()
             if (k not in TERMS_FIELDS or v is not None) and (k != "labels" or v)}
            | {"tenant": tenant})
                  if key is not None else None)
        return NewSchedule(
            channel=self.channel, payload=data, payload_kind=kind, headers=self.headers,
            due_ms=due_ms, tenant=tenant, key=key, ordering_key=self.ordering_key,
            overwrite_pending=task, key_retention_ms=key_retention_ms, request_digest=digest,
            policy=self.policy, terms=terms, labels=dict(self.labels),
        )


class ScheduleChange(BaseModel):
    """A PATCH of a PENDING schedule: any of a new due time, payload or headers."""

    model_config = ConfigDict(extra="forbid")

    payload: JsonValue = None
    payload_text: str | None = None
    payload_base64: str | None = None
    headers: Headers | None = None
    due_at: str | None = Field(None, description="RFC 3339 with an offset.")
    delay: Delay = Field(None, description="Seconds or an ISO 8601 duration.")


class ScheduleBatchIn(BaseModel):
    """A batch: every schedule is stored, or none (for the OpenAPI description)."""

    schedules: list[ScheduleIn] = Field(min_length=1)


class ChannelIn(BaseModel):
    """A channel registration."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128)
    kind: str
    config: dict[str, Any] = Field(default_factory=dict)
    tenant: TenantName = None


class RecurringChange(BaseModel):
    """A PATCH of a recurring schedule: any of its fields."""

    model_config = ConfigDict(extra="forbid")

    cron: str | None = Field(None, description="5 fields, or 6 with a leading seconds field "
                                                "(or give every).")
    every: Delay = Field(None, description="Instead of cron: fire every this long (seconds or "
                                           "ISO 8601 duration of days to seconds, absolute "
                                           "time: P1D is 24 h), from anchor.")
    anchor: str | None = Field(None, description="RFC 3339: an instant every counts from "
                                                 "(default: start, else when created).")
    jitter: Delay = Field(None, description="Each firing's messages are due up to this much "
                                            "later (seconds or ISO 8601 duration, at most a "
                                            "day), the same for every expansion of a firing.")
    timezone: str | None = Field(None, description="IANA zone name, e.g. Europe/Berlin.")
    channel: str | None = Field(None, min_length=1, max_length=128)
    payload: JsonValue = None
    payload_text: str | None = None
    payload_base64: str | None = None
    headers: Headers | None = None
    count: int | None = Field(None, ge=1, le=100_000, description="Messages per firing.")
    stagger: Delay = Field(None, description="Spread a firing's messages over this window "
                                             "(seconds or ISO 8601 duration).")
    start: str | None = Field(None, description="RFC 3339: no firing before it.")
    end: str | None = Field(None, description="RFC 3339: no firing after it.")
    misfire: MisfirePolicy | None = Field(
        None, description="Firings missed by more than misfire_grace (downtime): fire_once "
                          "fires the latest, fire_all fires each, skip drops them.")
    misfire_grace: Delay = Field(None, description="Seconds or ISO 8601 duration.")
    policy: str | None = Field(None, min_length=1, max_length=128)
    paused: bool | None = None
    max_lateness: Delay = Field(
        None, description="A firing's message is not sent this long or more after its due "
                          "time (seconds or ISO 8601 duration; it becomes EXPIRED). Default: "
                          "the channel's max_lateness.")
    retry: RetryIn | None = Field(None, description="Each firing's retry policy (over its "
                                                    "channel's and the dispatcher's).")
    labels: dict[str, str] | None = Field(
        None, description="Up to 16 key=value pairs to find it by; its firings carry them.")


class RecurringIn(RecurringChange):
    """A recurring schedule as a client sends it."""

    timezone: str = Field("UTC", description="IANA zone name, e.g. Europe/Berlin.")
    channel: str = Field(min_length=1, max_length=128)
    headers: Headers = Field(default_factory=dict)
    count: int = Field(1, ge=1, le=100_000, description="Messages per firing.")
    misfire: MisfirePolicy = MisfirePolicy.FIRE_ONCE
    paused: bool = False
    tenant: TenantName = None


class BackfillIn(BaseModel):
    """A past range of a recurring schedule's firings to fire now."""

    model_config = ConfigDict(extra="forbid")

    from_: str = Field(alias="from", description="RFC 3339: the first instant of the range.")
    to: str = Field(description="RFC 3339: the range ends before it (at most now, and no "
                                "later than the rule's expansion).")


class PolicyIn(BaseModel):
    """A throttling policy."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9._-]+$")
    tenant: TenantName = None
    max_in_flight: int = Field(ge=1, le=1_000_000, description="Most deliveries holding a "
                                                              "token at once.")
    rate: float | None = Field(None, gt=0, description="Most deliveries started per second.")
    token_lease: Delay = Field(300, description="A token not released within this long "
                                                "(seconds or ISO 8601 duration) comes back.")

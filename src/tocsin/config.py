"""Tocsin's configuration, in one place.

Every setting is read from a ``TOCSIN_``-prefixed environment variable (``TOCSIN_STORE``,
``TOCSIN_API_PORT`` ...) or from a TOML file named by ``TOCSIN_CONFIG`` (default
``tocsin.toml`` in the working directory, when it exists). ``tocsin config`` prints the result.
The defaults run everything on one machine: SQLite under ``.tocsin/``, Spark ``local[*]``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, TypeVar

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import (
    BaseSettings,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tocsin.domain.defaults import (
    BUCKETS,
    KEY_RETENTION_MS,
    MAX_ATTEMPTS,
    RETRY_BASE_MS,
    RETRY_CAP_MS,
    ms,
)
from tocsin.logs import DISPATCHER_JAVA_OPTIONS, SPARK_JAVA_OPTIONS, LogFormat, SparkLogLevel
from tocsin.redact import redact

T = TypeVar("T")

__all__ = ["CheckpointQuery", "ExpanderMode", "Settings", "current_settings"]


class CheckpointQuery(StrEnum):
    """The Spark streaming queries that keep a checkpoint, each in a folder of this name
    under the ``checkpoint`` setting."""

    DISPATCHER = "dispatcher"
    """Due schedules to their channels (``tocsin dispatcher``, ``tocsin up``)."""
    RELAY = "relay"
    """Hand-overs in the dispatcher's gaps between windows, as a Spark query (the test kit's:
    ``tocsin dispatcher``'s relay is a thread of its driver, with no checkpoint)."""
    EXPANDER = "expander"
    """Recurring rules into schedules."""
    INGEST = "ingest"
    """The Kafka commands topic into the store (``ingest_topic``); its offsets are the
    topic's, so losing this checkpoint replays the topic from its start."""


class ExpanderMode(StrEnum):
    """Where the dispatcher process expands recurring schedules into ordinary ones."""

    DRIVER = "driver"
    """A thread of the dispatcher's driver (the default): one indexed read a trigger, and no
    Spark query kept (a Python process, planners at start, the JVM's work every trigger)."""
    SPARK = "spark"
    """The ``tocsin-expander`` Spark query: each batch's bucket ranges expanded on executors,
    for a very large set of recurring schedules."""


class Settings(BaseSettings):
    """All of Tocsin's knobs, with defaults that work on one machine."""

    model_config = SettingsConfigDict(env_prefix="TOCSIN_", extra="ignore", frozen=True)

    home: Path = Field(
        Path(".tocsin"), description="Directory for the SQLite file, checkpoints, file channels."
    )
    store: str = Field(
        "",
        description="Store URL: sqlite:///path.db or postgresql://...; empty = SQLite under home.",
    )
    buckets: int = Field(
        BUCKETS, ge=1, le=4096, description="Buckets B, fixed when the store is created."
    )

    api_host: str = Field("127.0.0.1", description="Address the HTTP API binds to.")
    api_port: int = Field(
        8765, ge=0, le=65535, description="Port of the HTTP API (0 = any free port)."
    )
    api_key: SecretStr | None = Field(
        None, description="The API key the CLI and the Python client send; unset = the local "
                          "admin key (home/admin.key) when the API is on this machine."
    )
    encryption_key: SecretStr | None = Field(
        None, description="Seals channel secrets at rest (AES-256-GCM): 32 bytes in URL-safe "
                          "base64 (tocsin encryption new-key); never printed."
    )
    encrypt_payloads: bool = Field(
        False, description="Seal schedules' and rules' payloads at rest with the encryption "
                           "key too (opened for delivery and reads; needs the key)."
    )
    encryption_old_keys: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="While rotating: earlier encryption keys, still "
                                          "opened (comma-separated); never printed."
    )
    readyz_needs_key: bool = Field(
        False, description="/readyz answers only with a valid API key (default: anyone, "
                           "for load balancers and probes)."
    )
    metrics_needs_key: bool | None = Field(
        None, description="/metrics answers only with an admin key (its series are labelled "
                          "with every tenant's channels). Unset: an admin key once the store "
                          "holds more than one tenant, anyone while it holds only `default`."
    )
    ui_session_seconds: float = Field(
        8 * 3600.0, gt=0, le=30 * 86_400, description="How long a dashboard sign-in lasts; "
        "the session is kept server-side and ends sooner on sign-out or when its key is revoked."
    )
    tenant_max_pending: int = Field(
        0, ge=0, description="Most PENDING or CLAIMED schedules one tenant may hold "
                             "(0 = no cap)."
    )
    tenant_max_recurring: int = Field(
        0, ge=0, description="Most recurring rules one tenant may hold (0 = no cap)."
    )
    tenant_max_channels: int = Field(
        0, ge=0, description="Most channels one tenant may register (0 = no cap); each costs "
                             "the dispatcher a client and a destination to claim for."
    )
    tenant_recurring_per_minute: int = Field(
        0, ge=0, description="Most messages a minute one tenant's active recurring rules may "
                             "make together: the sum of count x firings a minute (0 = no cap)."
    )
    tenant_creates_per_second: float = Field(
        0.0, ge=0, description="Schedules one tenant may create per second, per API process "
                               "(0 = no cap)."
    )

    spark_master: str = Field("local[*]", description="Spark master URL for the dispatcher.")
    spark_log_level: SparkLogLevel = Field(
        SparkLogLevel.ERROR, description="Level of Spark's own logging (JVM and py4j/pyspark)."
    )
    spark_java_options: str = Field(
        SPARK_JAVA_OPTIONS, description="Extra options of Spark's JVMs (driver and executors)."
    )
    dispatcher_java_options: str = Field(
        DISPATCHER_JAVA_OPTIONS, description="Extra options of the dispatcher's Spark JVMs, "
        "after spark_java_options (not the batch jobs')."
    )
    log_format: LogFormat = Field(
        LogFormat.TEXT, description="Tocsin's log lines: text (people) or json (collectors)."
    )
    trigger_seconds: float = Field(
        1.0, gt=0, description="How often the driver asks whether anything falls due within a "
        "hand-over window (Spark's trigger; one indexed read when idle)."
    )
    partitions: int = Field(
        4, ge=1, description="Bucket-range partitions (Spark tasks) per micro-batch."
    )
    hand_over_seconds: float = Field(
        6.0, ge=0, description="Each dispatch task's hand-over window: after its micro-batch it "
        "keeps its buckets this long and hands each schedule over at its due time (0: off). "
        "Longer windows mean fewer batch turns (each a burst of Spark's planning and task "
        "starts, which leaves rows late for a moment)."
    )
    keep_warm_seconds: float = Field(
        0.0, ge=0, description="An idle dispatcher still runs a micro-batch this often, so "
        "Spark keeps its Python workers (it stops those idle for a minute). 0 (default): "
        "never; workers start warm from Spark's daemon, and after a quiet spell a batch "
        "starts 5 s ahead of the next due schedule."
    )
    recurring_expander: ExpanderMode = Field(
        ExpanderMode.DRIVER, description="Where recurring schedules are expanded: driver (a "
        "thread of the dispatcher process) or spark (the tocsin-expander query, on executors)."
    )
    relay: bool = Field(
        True, description="Run the relay, a thread of the dispatcher process that hands over "
        "in the main query's gaps between windows."
    )
    batch_cap: int = Field(100_000, ge=1, description="Most schedules claimed in one micro-batch.")
    lease_seconds: float = Field(
        120.0, gt=0, description="A claim older than this is claimed again."
    )
    send_timeout_max_seconds: float = Field(
        30.0, gt=0, le=600, description="Bulkheads: the longest any one send may take "
        "(connect, send, whole answer), whatever a channel's own timeout says; a channel's "
        "timeout, flush_timeout and the Kafka/RabbitMQ timeouts it sets are capped by it."
    )
    send_connect_attempts_max: int = Field(
        2, ge=1, le=10, description="Bulkheads: the most connection attempts a RabbitMQ "
        "channel's URL may ask for (connection_attempts)."
    )
    send_retry_delay_max_seconds: float = Field(
        1.0, ge=0, description="Bulkheads: the longest pause between connection attempts a "
        "RabbitMQ channel's URL may ask for (retry_delay)."
    )
    send_linger_max_ms: int = Field(
        100, ge=0, description="Bulkheads: the longest a Kafka channel's producer may hold "
        "messages to batch them (linger.ms, queue.buffering.max.ms)."
    )
    webhook_connections_max: int = Field(
        4096, ge=1, description="The most HTTP connections the webhook channels of one process "
        "hold open at once, in all (each channel also holds at most its own concurrency); "
        "requests beyond wait for a free one within their deadline."
    )
    channel_threads: int = Field(
        8, ge=1, le=1024, description="Threads of a process's pool for channels whose clients "
        "block (file, Kafka, RabbitMQ) when the dispatcher awaits their sends: how many of "
        "their destinations send at once in each process (each has one send out at a time)."
    )
    channel_build_seconds: float = Field(
        2.0, gt=0, le=600, description="Bulkheads: how long a destination's sends wait for its "
        "channel to be built (DNS included) before they go back unsent (no attempt "
        "spent); the build goes on beside, and no other destination waits for it."
    )
    lane_seconds: float = Field(
        0.25, gt=0, description="Bulkheads: a destination's lane in a dispatcher process "
        "holds about this many seconds of its own sending (by its measured rate, at least "
        "lane_min_rows); while it is full, claims pass over the destination."
    )
    lane_min_rows: int = Field(
        256, ge=1, description="Bulkheads: the smallest room of a destination's lane."
    )
    breaker_failures: int = Field(
        5, ge=1, description="Bulkheads: consecutive failed attempts (timeouts, connection "
        "failures, 5xx) to one destination that open its circuit breaker."
    )
    breaker_open_seconds: float = Field(
        5.0, gt=0, description="Bulkheads: how long an opened breaker holds its destination "
        "before one probe; each failed probe doubles it, up to breaker_max_open_seconds."
    )
    breaker_max_open_seconds: float = Field(
        300.0, gt=0, description="Bulkheads: the longest a breaker holds between probes."
    )
    checkpoint: str = Field(
        "", description="Where the Spark queries keep their checkpoints, one folder each under "
        "it (dispatcher, expander, ingest): a path or a URI (file:///..., hdfs://..., "
        "s3a://...), kept as given. Empty = home/checkpoint."
    )

    grace_seconds: float = Field(60.0, ge=0, description="How far in the past a due time may lie.")
    max_payload_bytes: int = Field(256 * 1024, ge=1, description="Largest payload accepted.")
    max_batch_items: int = Field(10_000, ge=1, description="Most schedules in one batch request.")
    max_body_bytes: int = Field(
        16 * 1024 * 1024, ge=1024,
        description="Largest request body; refused with 413 while it is read, before parsing.",
    )
    max_json_depth: int = Field(
        64, ge=4, le=512, description="Deepest nesting of arrays and objects in a request body."
    )
    recurring_max_per_minute: int = Field(
        100_000, ge=1,
        description="Most messages a recurring schedule may make in a minute "
        "(firings a minute x count).",
    )
    recurring_backfill_max: int = Field(
        1_000, ge=1, le=1_000_000,
        description="Most firings one backfill of a recurring schedule fires; a wider range "
                    "is refused.",
    )

    retry_base_seconds: float = Field(RETRY_BASE_MS / 1000, gt=0,
                                      description="First retry delay.")
    retry_cap_seconds: float = Field(RETRY_CAP_MS / 1000, gt=0, description="Longest retry delay.")
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1, description="Attempts before a schedule is dead.")
    recurring_horizon_seconds: float = Field(
        600.0, ge=1, description="Recurring firings this far ahead are expanded into schedules."
    )
    task_key_retention_seconds: float = Field(
        KEY_RETENTION_MS / 1000, ge=0, description="How long a completed task key answers repeats."
    )
    ingest_topic: str = Field("", description="Kafka commands topic read by `tocsin ingest` "
                                               "(and by up/dispatcher when set); empty = off.")
    ingest_bootstrap: str = Field("127.0.0.1:9092", description="Kafka brokers of the commands "
                                                                "topic.")
    ingest_rejects_topic: str = Field("", description="Topic for bad commands; empty = "
                                                      "<ingest_topic>.rejects.")
    ingest_reply_topic: str = Field("", description="Topic for every command's answer; "
                                                    "empty = no answers.")
    ingest_max_per_batch: int = Field(100_000, ge=1, description="Most commands per "
                                                                 "micro-batch.")
    ingest_tenant: str = Field(
        "default", description="The one tenant the commands topic acts in: a command naming "
        "another tenant is refused, and a cancel or reschedule by id finds only this tenant's "
        "schedules. One topic (and one ingest) per tenant; the topic is the operator's.")
    ingest_kafka: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="librdkafka settings of the commands topic's "
        "consumer and producer, NAME=VALUE (comma-separated; e.g. security.protocol=SASL_SSL,"
        "sasl.mechanism=SCRAM-SHA-512): TLS, SASL and connection settings only.")
    archive_retention_seconds: float = Field(
        7 * 86_400.0, ge=0, description="Finished schedules (and their attempts) older than "
        "this move from the store to the archive (`tocsin archive`).")
    archive_tenant_retention: Annotated[list[str], NoDecode] = Field(
        default_factory=list, description="Per-tenant retention overrides, TENANT=SECONDS "
        "(comma-separated), e.g. acme=2592000.")
    archive_every_seconds: float = Field(
        86_400.0, ge=0, description="How often the dispatcher process runs the archive job "
        "(first run one interval after start); 0 = never.")
    archive_dir: str = Field("", description="Where the archive's Parquet goes (a folder, or a "
                             "URI pyarrow and Spark both open: s3a:// or s3://, gs://, hdfs://, "
                             "abfs://). Empty = home/archive.")

    file_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Directories file channels may write under (comma-separated); a relative "
        "path lands under the first. Empty = home/channels.",
    )
    credential_roots: Annotated[list[Path], NoDecode] = Field(
        default_factory=list,
        description="Directories Kafka/RabbitMQ TLS files may be read from (comma-separated). "
        "Empty = home/credentials.",
    )
    webhook_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="CIDRs and host names webhooks may reach although loopback, private, "
        "link-local or reserved (comma-separated; e.g. 127.0.0.0/8,::1 for local receivers). "
        "Empty = public addresses only.",
    )

    broker_allow: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description="CIDRs and host names Kafka and RabbitMQ channels' brokers may be at "
        "although loopback, private, link-local or reserved (comma-separated; e.g. "
        "10.20.0.0/16,kafka.internal). Empty = public addresses only.",
    )
    allow_loopback: bool = Field(
        False, description="Webhooks and brokers may also reach this machine's loopback "
        "(127.0.0.0/8, ::1): the embedded single-user mode, which `tocsin up` turns on unless "
        "this is set. Turn it off when remote users reach the API (e.g. behind a proxy).",
    )

    @field_validator("ingest_tenant")
    @classmethod
    def _tenant_name(cls, value: str) -> str:
        """The commands topic's tenant is a tenant name."""
        from tocsin.domain import check_tenant
        from tocsin.errors import ValidationError

        try:
            return check_tenant(value, "ingest_tenant")
        except ValidationError as exc:
            raise ValueError(exc.reason) from None

    @field_validator("file_roots", "credential_roots", "webhook_allow", "broker_allow",
                     "ingest_kafka", "archive_tenant_retention", "encryption_old_keys",
                     mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        """A list from the environment is comma-separated."""
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        toml_file = Path(os.environ.get("TOCSIN_CONFIG", "tocsin.toml"))
        return (
            init_settings,
            env_settings,
            TomlConfigSettingsSource(settings_cls, toml_file=toml_file),
        )

    @property
    def store_url(self) -> str:
        """The store URL, defaulting to a SQLite file under ``home``."""
        return (
            self.store or f"sqlite:///{(self.home / 'tocsin.db').resolve()}"
        )  # 4 slashes: absolute

    @property
    def grace_ms(self) -> int:
        """``grace_seconds`` in milliseconds."""
        return ms(self.grace_seconds)

    @property
    def key_retention_ms(self) -> int:
        """``task_key_retention_seconds`` in milliseconds."""
        return ms(self.task_key_retention_seconds)

    @property
    def archive_path(self) -> str:
        """Where the archive's Parquet goes: ``archive_dir``, else ``home/archive``."""
        return self.archive_dir or str((self.home / "archive").resolve())

    @property
    def checkpoint_base(self) -> str:
        """Where the queries' checkpoints live: ``checkpoint`` as given, else
        ``home/checkpoint`` made absolute."""
        return self.checkpoint or str((self.home / "checkpoint").resolve())

    def checkpoint_for(self, query: CheckpointQuery, *, slot: int = 0) -> str:
        """The checkpoint location of ``query``: a folder named after it under
        :attr:`checkpoint_base`, in the base's own form (a path or a URI). ``slot``: the
        dispatcher's checkpoint slot (:mod:`tocsin.dispatcher.runs`): the first dispatcher's
        folders are ``dispatcher``..., a second one's ``dispatcher-1``..., so dispatchers
        started with the same settings never share a query's checkpoint."""
        return f"{self.checkpoint_base.rstrip('/')}/{query.value}{f'-{slot}' if slot else ''}"

    @property
    def channel_roots(self) -> list[Path]:
        """Where file channels may write: ``file_roots``, else ``home/channels``."""
        return self.file_roots or [self.home / "channels"]

    @property
    def tls_roots(self) -> list[Path]:
        """Where channel TLS files may be read: ``credential_roots``, else
        ``home/credentials``."""
        return self.credential_roots or [self.home / "credentials"]

    def _effective(self) -> dict[str, Any]:
        data = self.model_dump(mode="json")
        data["store"] = self.store_url
        data["checkpoint"] = self.checkpoint_base
        data["file_roots"] = [str(p) for p in self.channel_roots]
        data["credential_roots"] = [str(p) for p in self.tls_roots]
        return data

    def summary(self) -> dict[str, Any]:
        """The effective settings as plain values, secrets redacted: for ``tocsin config``,
        the startup line and logs."""
        data = self._effective()
        data["checkpoints"] = {query.value: self.checkpoint_for(query)
                               for query in CheckpointQuery}
        redacted: dict[str, Any] = redact(data)
        return redacted

    def environment(self) -> dict[str, str]:
        """The effective settings as ``TOCSIN_*`` environment variables (secrets included),
        for a child process such as the dispatcher."""
        data = self._effective()
        if self.encryption_key is not None:  # model_dump masks it: the child needs the key
            data["encryption_key"] = self.encryption_key.get_secret_value()
        return {f"TOCSIN_{k.upper()}": ",".join(v) if isinstance(v, list) else str(v)
                for k, v in data.items() if v is not None and k != "api_key"}


_CURRENT: list[tuple[object, Settings, dict[Callable[[Settings], Any], Any]]] = []
_ENVIRON: Any = os.environb if os.supports_bytes_environ else os.environ
_VARIABLES: Any = getattr(_ENVIRON, "_data", _ENVIRON)
"""The variables themselves: ``os.environ`` keeps them in a plain dict, which it changes
with every assignment, and which reads ten times faster than through the mapping's
protocol (a generator and a decode per variable: 30 of a channel build's 116 us)."""
_PREFIX: Any = b"TOCSIN_" if os.supports_bytes_environ else "TOCSIN_"


def _stamp() -> object:
    """What :func:`current_settings` compares: the working directory, the config file's
    modification time and the ``TOCSIN_`` variables (read as bytes: decoding every variable
    of the environment took a quarter of a millisecond a call)."""
    try:
        stamp: object = os.stat(os.environ.get("TOCSIN_CONFIG", "tocsin.toml")).st_mtime_ns
    except OSError:
        stamp = None
    return (os.getcwd(), stamp, _tocsin_variables())


_SEEN_ENVIRON: list[Any] = [None, ()]
"""A copy of the environment's variables when last looked at, and their ``TOCSIN_`` ones."""


def _tocsin_variables() -> object:
    """The ``TOCSIN_`` variables, sorted; looked for again only when a variable changed (one
    comparison of two dicts, in C: a channel build asks twice, and walking every variable
    each time was a tenth of a dispatcher's Python time beside 10 000 destinations)."""
    seen = _SEEN_ENVIRON
    if seen[0] != _VARIABLES:
        found = sorted((k, v) for k, v in _VARIABLES.items() if k[:7].upper() == _PREFIX)
        seen[:] = [dict(_VARIABLES), tuple(found)]
    return seen[1]


def current_settings() -> Settings:
    """:class:`Settings` as they are now, read again only when a ``TOCSIN_`` variable, the
    working directory or the config file changed: every channel build asks (its limits, its
    destination policy), and reading them took 15 ms, most of a webhook channel's build (10 000
    destinations: minutes of builds)."""
    return _current()[1]


def _current() -> tuple[object, Settings, dict[Callable[[Settings], Any], Any]]:
    key = _stamp()
    cached = _CURRENT[0] if _CURRENT else None
    if cached is not None and cached[0] == key:
        return cached
    entry: tuple[object, Settings, dict[Callable[[Settings], Any], Any]] = (key, Settings(), {})
    _CURRENT[:] = [entry]
    return entry


def from_current_settings(make: Callable[[Settings], T]) -> T:
    """``make(current_settings())``, made once per reading of the settings (a channel
    build's destination policy and send limits: each had cost a build a millisecond)."""
    _, settings, derived = _current()
    if make not in derived:
        derived[make] = make(settings)
    return derived[make]  # type: ignore[no-any-return]

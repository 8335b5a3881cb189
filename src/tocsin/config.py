"""Tocsin's configuration, in one place.

Every setting is read from a ``TOCSIN_``-prefixed environment variable (``TOCSIN_STORE``,
``TOCSIN_API_PORT`` ...) or from a TOML file named by ``TOCSIN_CONFIG`` (default
``tocsin.toml`` in the working directory, when it exists). ``tocsin config`` prints the result.
The defaults run everything on one machine: SQLite under ``.tocsin/``, Spark ``local[*]``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import Field, SecretStr
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from tocsin.logs import LogFormat, SparkLogLevel

__all__ = ["Settings"]


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
        64, ge=1, le=4096, description="Buckets B, fixed when the store is created."
    )

    api_host: str = Field("127.0.0.1", description="Address the HTTP API binds to.")
    api_port: int = Field(
        8765, ge=0, le=65535, description="Port of the HTTP API (0 = any free port)."
    )
    api_key: SecretStr | None = Field(
        None, description="The API key the CLI and the Python client send; unset = the local "
                          "admin key (home/admin.key) when the API is on this machine."
    )
    readyz_needs_key: bool = Field(
        False, description="/readyz answers only with a valid API key (default: anyone, "
                           "for load balancers and probes)."
    )
    metrics_needs_key: bool = Field(
        False, description="/metrics answers only with an admin key (it counts every "
                           "tenant's schedules; default: anyone, for Prometheus)."
    )
    tenant_max_pending: int = Field(
        0, ge=0, description="Most PENDING or CLAIMED schedules one tenant may hold "
                             "(0 = no cap)."
    )
    tenant_creates_per_second: float = Field(
        0.0, ge=0, description="Schedules one tenant may create per second, per API process "
                               "(0 = no cap)."
    )

    spark_master: str = Field("local[*]", description="Spark master URL for the dispatcher.")
    spark_log_level: SparkLogLevel = Field(
        SparkLogLevel.ERROR, description="Level of Spark's own logging (JVM and py4j/pyspark)."
    )
    log_format: LogFormat = Field(
        LogFormat.TEXT, description="Tocsin's log lines: text (people) or json (collectors)."
    )
    trigger_seconds: float = Field(
        1.0, gt=0, description="Dispatcher micro-batch trigger interval."
    )
    partitions: int = Field(
        4, ge=1, description="Bucket-range partitions (Spark tasks) per micro-batch."
    )
    batch_cap: int = Field(100_000, ge=1, description="Most schedules claimed in one micro-batch.")
    lease_seconds: float = Field(
        120.0, gt=0, description="A claim older than this is claimed again."
    )
    checkpoint: Path | None = Field(
        None, description="Spark checkpoint directory; default home/checkpoint."
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

    retry_base_seconds: float = Field(1.0, gt=0, description="First retry delay.")
    retry_cap_seconds: float = Field(300.0, gt=0, description="Longest retry delay.")
    max_attempts: int = Field(8, ge=1, description="Attempts before a schedule is dead.")
    recurring_horizon_seconds: float = Field(
        600.0, ge=1, description="Recurring firings this far ahead are expanded into schedules."
    )
    task_key_retention_seconds: float = Field(
        7 * 86400.0, ge=0, description="How long a completed task key answers repeats."
    )

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
    def checkpoint_dir(self) -> Path:
        """Where the dispatcher's Spark checkpoint lives."""
        return self.checkpoint or self.home / "checkpoint"

    def summary(self) -> dict[str, Any]:
        """The effective settings as plain values, for ``tocsin config``."""
        data = self.model_dump(mode="json")
        data["store"] = self.store_url
        data["checkpoint"] = str(self.checkpoint_dir)
        return data

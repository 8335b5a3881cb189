"""Tocsin's domain: the value objects every layer speaks (schedules, deliveries, channels)."""

from __future__ import annotations

from tocsin.domain.apikey import ApiKey, Role
from tocsin.domain.channel import ChannelKind, ChannelSpec, HoldReason, OnDead
from tocsin.domain.cron import CronTrigger
from tocsin.domain.delivery import Ack, Delivery, Envelope, Outcome, Result
from tocsin.domain.interval import IntervalTrigger
from tocsin.domain.policy import Policy, RateBucket
from tocsin.domain.recurring import (
    Expansion,
    Firing,
    FiringOutcome,
    MisfirePolicy,
    Recurring,
    SkippedFiring,
    SkipReason,
    expand,
    firing_schedule_id,
)
from tocsin.domain.retry import RetryPolicy
from tocsin.domain.schedule import NewSchedule, PayloadKind, Schedule, ScheduleOrder, Status
from tocsin.domain.selection import MAX_BULK, BulkResult, Selection
from tocsin.domain.tenant import DEFAULT_TENANT, TENANT_NAME, Durability, Tenant, check_tenant

__all__ = [
    "DEFAULT_TENANT",
    "MAX_BULK",
    "TENANT_NAME",
    "Ack",
    "ApiKey",
    "BulkResult",
    "ChannelKind",
    "ChannelSpec",
    "CronTrigger",
    "Delivery",
    "Durability",
    "Envelope",
    "Expansion",
    "Firing",
    "FiringOutcome",
    "HoldReason",
    "IntervalTrigger",
    "MisfirePolicy",
    "NewSchedule",
    "OnDead",
    "Outcome",
    "PayloadKind",
    "Policy",
    "RateBucket",
    "Recurring",
    "Result",
    "RetryPolicy",
    "Role",
    "Schedule",
    "ScheduleOrder",
    "Selection",
    "SkipReason",
    "SkippedFiring",
    "Status",
    "Tenant",
    "check_tenant",
    "expand",
    "firing_schedule_id",
]

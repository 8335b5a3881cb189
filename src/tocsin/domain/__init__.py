"""Tocsin's domain: the value objects every layer speaks (schedules, deliveries, channels)."""

from __future__ import annotations

from tocsin.domain.channel import ChannelKind, ChannelSpec
from tocsin.domain.delivery import Ack, Delivery, Envelope, Outcome, Result
from tocsin.domain.retry import RetryPolicy
from tocsin.domain.schedule import NewSchedule, PayloadKind, Schedule, Status

__all__ = [
    "Ack",
    "ChannelKind",
    "ChannelSpec",
    "Delivery",
    "Envelope",
    "NewSchedule",
    "Outcome",
    "PayloadKind",
    "Result",
    "RetryPolicy",
    "Schedule",
    "Status",
]

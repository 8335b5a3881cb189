"""What every route needs, hung on the application's state."""

from __future__ import annotations

from dataclasses import dataclass, field

from fastapi import Request

from tocsin.abc import Store
from tocsin.clock import Clock
from tocsin.config import Settings
from tocsin.quotas import Quotas
from tocsin.validation.schedule import registered

__all__ = ["Deps", "registered"]


@dataclass(frozen=True, kw_only=True, slots=True)
class Deps:
    """The store, the clock, the settings and the per-tenant caps of one application."""

    store: Store
    clock: Clock
    settings: Settings
    expect_dispatcher: bool
    quotas: Quotas = field(default_factory=Quotas)

    @staticmethod
    def of(request: Request) -> Deps:
        """The dependencies of the application serving ``request``."""
        deps: Deps = request.app.state.deps
        return deps

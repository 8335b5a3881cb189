"""The HTTP API: ``create_app`` builds it; one module per noun."""

from __future__ import annotations

__all__: list[str] = []

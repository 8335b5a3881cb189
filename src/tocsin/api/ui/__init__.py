"""The web dashboard at ``/ui``: server-rendered pages (Jinja2) made live with htmx (vendored,
nothing loaded from elsewhere), behind the same API keys as the API (see :mod:`.session`)."""

from __future__ import annotations

from tocsin.api.ui.pages import install_ui

__all__ = ["install_ui"]

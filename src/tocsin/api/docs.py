"""``/docs``: Swagger UI from files shipped with the install, never from a CDN.

FastAPI's default page loads Swagger UI's script from a CDN with a floating major version and
no integrity check, on the dashboard's own origin: whoever controls that CDN could run script
beside the dashboard's session. Here the page loads ``swagger-ui-bundle.js`` and its CSS from
``/docs/static``, served from the ``swagger-ui-bundle`` package (a pinned Swagger UI,
:data:`SWAGGER_UI`), and carries a Content-Security-Policy that allows scripts from this
origin only (and the page's own inline start-up script). ReDoc (CDN-only) is off.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles

__all__ = ["SWAGGER_UI", "install_docs"]

log = logging.getLogger("tocsin.api")
SWAGGER_UI = "4.15.5"
"""The Swagger UI release ``swagger-ui-bundle`` 1.1 ships (pinned in pyproject.toml)."""
_CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' "
        "'unsafe-inline'; img-src 'self' data:; connect-src 'self'; object-src 'none'; "
        "base-uri 'none'; frame-ancestors 'none'")


def install_docs(app: FastAPI) -> None:
    """Serve ``/docs`` and ``/docs/static`` (nothing when the package is missing: the API
    runs, its OpenAPI document stays at ``/openapi.json``)."""
    try:
        from swagger_ui_bundle import swagger_ui_path
    except ImportError:
        log.warning("/docs is off: pip install swagger-ui-bundle (the API itself runs)")
        return
    app.mount("/docs/static", StaticFiles(directory=str(swagger_ui_path)), name="docs-static")

    @app.get("/docs", include_in_schema=False)
    def docs() -> HTMLResponse:
        page = get_swagger_ui_html(openapi_url=app.openapi_url or "/openapi.json",
                                   title=f"{app.title} - API",
                                   swagger_js_url="/docs/static/swagger-ui-bundle.js",
                                   swagger_css_url="/docs/static/swagger-ui.css",
                                   swagger_favicon_url="/docs/static/favicon-32x32.png")
        page.headers["Content-Security-Policy"] = _CSP
        page.headers["X-Content-Type-Options"] = "nosniff"
        return page

"""Issue 40, finding 5: ``/docs`` loads Swagger UI from the files shipped with the install (a
pinned release whose files are checked by hash here), never from a CDN, with a
Content-Security-Policy that allows scripts from this origin only."""

from __future__ import annotations

import hashlib
import re

import httpx

from tocsin.api.docs import SWAGGER_UI

PINNED = {
    "swagger-ui-bundle.js": "fd76294e33356ab3fd111ddaeeb10d3f79de8ae1a4d34dbf777f5eef224648d9",
    "swagger-ui.css": "e883f234c6ef0b7dbb6d473fb45a00b85e98d58282f9dd1cc70bcc57ef12ef6a",
}
"""SHA-256 of Swagger UI 4.15.5's files as swagger-ui-bundle 1.1.0 ships them."""


def test_docs_load_nothing_from_elsewhere(api: httpx.Client) -> None:
    page = api.get("/docs")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources and all(s.startswith("/docs/static/") for s in sources), sources
    assert "cdn" not in page.text.lower() and "https://" not in page.text
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp
    assert api.get("/redoc").status_code == 404


def test_the_shipped_files_are_the_pinned_release(api: httpx.Client) -> None:
    assert SWAGGER_UI == "4.15.5"
    for name, digest in PINNED.items():
        served = api.get(f"/docs/static/{name}")
        assert served.status_code == 200
        assert hashlib.sha256(served.content).hexdigest() == digest, name

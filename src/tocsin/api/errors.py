"""Tocsin's errors as HTTP answers, in one place: each error class answers its status from
:data:`tocsin.errors.HTTP_STATUS` (422 validation, 413 body too large, 415 not JSON, 404 not
found, 409 conflict, 503 store, any other Tocsin error 500; 401 no valid key, 403 forbidden,
429 a tenant's cap), the table the client reads back from. A 401 also names the scheme
(``WWW-Authenticate: Bearer``) and a 429 says when to come back (``Retry-After``):
:func:`headers_of`.

FastAPI's own request validation answers 422 in the same shape (``field`` is the location,
``errors`` lists every problem), and so does a body FastAPI cannot read (which it would answer
400); routing errors (unknown path, wrong method) keep their status
with the same body; anything unexpected is a 500 with the same body, never a stack trace.
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tocsin.errors import (
    HTTP_STATUS,
    AuthenticationError,
    QuotaExceededError,
    StoreError,
    TocsinError,
    ValidationError,
    error_body,
    status_of,
)
from tocsin.validation.schedule import reason_of

log = logging.getLogger("tocsin.api")
STORE_FAILED = "the store failed or cannot be reached; try again (the server's log says why)"
"""What a 503 says: the store's own text (a database file, a host) stays in the server's log."""

__all__ = ["STATUS", "STORE_FAILED", "error_body", "headers_of", "install_error_handlers",
           "reason_of", "status_of"]

STATUS = HTTP_STATUS
"""The one table of statuses, shared with the client (:data:`tocsin.errors.HTTP_STATUS`)."""


def headers_of(exc: TocsinError) -> dict[str, str] | None:
    """The response headers an error's status calls for (RFC 9110: 401 names the scheme;
    429 says when to come back)."""
    if isinstance(exc, AuthenticationError):
        return {"WWW-Authenticate": 'Bearer realm="tocsin"'}
    if isinstance(exc, QuotaExceededError):
        return {"Retry-After": str(exc.retry_after_s)}
    return None


def _field(loc: tuple[Any, ...]) -> str:
    parts = [str(p) for p in loc if p not in ("body", "query", "path", "header")]
    return ".".join(parts) or "body"


def _problem(error: Any) -> dict[str, str]:
    if error.get("type") == "json_invalid":
        detail = (error.get("ctx") or {}).get("error", "")
        return {"field": "body", "reason": f"malformed JSON: {detail}".rstrip(": ")}
    return {"field": _field(tuple(error.get("loc", ()))), "reason": reason_of(error)}


def install_error_handlers(app: FastAPI) -> None:
    """Route every error through :data:`STATUS`."""

    @app.exception_handler(TocsinError)
    async def tocsin_error(request: Request, exc: TocsinError) -> JSONResponse:
        if isinstance(exc, StoreError):  # its text names files and hosts: the log has it
            log.error("store error: %s %s: %s", request.method, request.url.path, exc)
            exc = StoreError(STORE_FAILED)
        return JSONResponse(error_body(exc), status_code=status_of(exc),
                            headers=headers_of(exc))

    @app.exception_handler(RequestValidationError)
    async def request_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_problem(e) for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "reason": "invalid request"}
        return JSONResponse(error_body(ValidationError(first["field"], first["reason"],
                                                       errors=errors)), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 400:  # FastAPI could not read the body (e.g. not UTF-8)
            return await tocsin_error(request, ValidationError("body", f"malformed JSON: "
                                                                       f"{exc.detail}"))
        message = f"{exc.detail}: {request.method} {request.url.path}"
        return JSONResponse({"error": {"type": "HTTPError", "message": message}},
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": {"type": "InternalError",
                                       "message": f"internal error ({type(exc).__name__})"}},
                            status_code=500)

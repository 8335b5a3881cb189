"""Tocsin's errors as HTTP answers, in one place.

======================  ======
error                   status
======================  ======
ValidationError         422
NotFoundError           404
ConflictError           409
StoreError              503
any other TocsinError   500
======================  ======

FastAPI's own request validation answers 422 in the same shape (``field`` is the location,
``errors`` lists every problem); routing errors (unknown path, wrong method) keep their status
with the same body; anything unexpected is a 500 with the same body, never a stack trace.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from tocsin.errors import ConflictError, NotFoundError, StoreError, TocsinError, ValidationError
from tocsin.intake import reason_of

__all__ = ["STATUS", "error_body", "install_error_handlers", "reason_of", "status_of"]

STATUS: dict[type[TocsinError], int] = {
    ValidationError: 422,
    NotFoundError: 404,
    ConflictError: 409,
    StoreError: 503,
}


def status_of(exc: TocsinError) -> int:
    """The HTTP status for an error."""
    for cls in type(exc).__mro__:
        if cls in STATUS:
            return STATUS[cls]
    return 500


def error_body(exc: TocsinError) -> dict[str, Any]:
    """The JSON body for an error."""
    body: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, ValidationError):
        body.update(field=exc.field, reason=exc.reason, errors=exc.errors)
    if isinstance(exc, ConflictError):
        body.update(status=exc.status, id=exc.ident)
    if isinstance(exc, NotFoundError):
        body.update(kind=exc.kind, id=exc.ident)
    return {"error": body}


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
    async def tocsin_error(_: Request, exc: TocsinError) -> JSONResponse:
        return JSONResponse(error_body(exc), status_code=status_of(exc))

    @app.exception_handler(RequestValidationError)
    async def request_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [_problem(e) for e in exc.errors()]
        first = errors[0] if errors else {"field": "body", "reason": "invalid request"}
        return JSONResponse(error_body(ValidationError(first["field"], first["reason"],
                                                       errors=errors)), status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        message = f"{exc.detail}: {request.method} {request.url.path}"
        return JSONResponse({"error": {"type": "HTTPError", "message": message}},
                            status_code=exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        return JSONResponse({"error": {"type": "InternalError",
                                       "message": f"internal error ({type(exc).__name__})"}},
                            status_code=500)

"""The error answers of every route, in the OpenAPI document, by one rule.

Every route can answer 413, 415 and 422 (the body limits and validation run before it) and 503
(the store is down); every ``/v1`` route also 401, 403 and 429 (API keys, per-tenant caps); a
route with a path parameter 404; a route that changes something 409. :func:`document_errors`
adds those to each operation of the document, so a new route is documented without anyone
remembering to.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

__all__ = ["ERROR_SCHEMA", "ErrorOut", "document_errors", "statuses_of"]

ERROR_SCHEMA = "Error"
"""The name of the error body's schema among the OpenAPI document's components."""

WHY = {
    401: "No API key, or one that is unknown or revoked.",
    403: "The key may not do this (another tenant's write, a read-only key, an admin route).",
    404: "No such object (another tenant's object answers the same).",
    409: "The object's state forbids it: too late to cancel, a key reused, still in use.",
    413: "The request body is over the size limit (setting max_body_bytes).",
    415: "A request body that is not application/json.",
    422: "Bad input: `field` names where, `reason` says why; nothing was stored.",
    429: "Over the tenant's rate; retry after the `Retry-After` header's seconds.",
    503: "The store is unavailable.",
}


class ErrorDetail(BaseModel):
    """What went wrong. ``field``, ``reason`` and ``errors`` come with 413, 415 and 422;
    ``status`` and ``id`` with 409; ``kind`` and ``id`` with 404."""

    type: str
    message: str
    field: str | None = None
    reason: str | None = None
    errors: list[dict[str, Any]] | None = None
    status: str | None = None
    id: str | None = None
    kind: str | None = None


class ErrorOut(BaseModel):
    """The body of every error answer."""

    error: ErrorDetail


def statuses_of(path: str, method: str) -> list[int]:
    """The error statuses the operation ``method`` on ``path`` can answer (see the module
    docstring)."""
    statuses = {413, 415, 422, 503}
    if path.startswith("/v1/"):
        statuses |= {401, 403, 429}
    if "{" in path:
        statuses.add(404)
    if method.upper() not in ("GET", "HEAD"):
        statuses.add(409)
    return sorted(statuses)


def document_errors(document: dict[str, Any]) -> None:
    """Add every operation's error answers, with the :class:`ErrorOut` body, to an OpenAPI
    ``document`` (replacing FastAPI's own 422, whose body is not the one Tocsin sends), and
    the body's schemas to its components."""
    ref = {"$ref": f"#/components/schemas/{ERROR_SCHEMA}"}
    for path, operations in document.get("paths", {}).items():
        for method, operation in operations.items():
            answers = operation.setdefault("responses", {})
            for status in statuses_of(path, method):
                answers[str(status)] = {"description": WHY[status],
                                        "content": {"application/json": {"schema": ref}}}
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    schemas.pop("HTTPValidationError", None)
    schemas.pop("ValidationError", None)
    schema = ErrorOut.model_json_schema(ref_template="#/components/schemas/{model}")
    schemas.update(schema.pop("$defs", {}), **{ERROR_SCHEMA: schema})

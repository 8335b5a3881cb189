"""Path and query parameters checked before any route runs: text the store can hold
(:mod:`tocsin.validation.text`)."""

from __future__ import annotations

from fastapi import Request  # at run time: FastAPI reads the annotation of check_params

from tocsin.errors import ValidationError
from tocsin.validation.text import value_problem

__all__ = ["check_params"]


def check_params(request: Request) -> None:
    """Refuse NUL or a lone surrogate in any path or query parameter (a dependency of every
    route): ``/v1/schedules/a%00b`` is a 422 on ``schedule_id``, not a store error."""
    for params in (request.path_params, request.query_params):
        for name, value in params.items():
            if isinstance(value, str) and (found := value_problem(value, name)) is not None:
                raise ValidationError(*found)

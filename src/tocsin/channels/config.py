"""Channel configuration: each kind declares a frozen dataclass; :func:`parse_config` checks a
registration's ``config`` against it and names the bad field."""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from typing import Any, TypeVar, Union, get_args, get_origin

from tocsin.domain.channel import OnDead
from tocsin.errors import ValidationError

__all__ = ["parse_config"]

T = TypeVar("T")


def _accepts(tp: Any, value: Any) -> bool:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        return any(_accepts(arg, value) for arg in get_args(tp))
    if tp is type(None):
        return value is None
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if origin is list:
        (item_t,) = get_args(tp)
        return isinstance(value, list) and all(_accepts(item_t, v) for v in value)
    if origin is dict:
        key_t, value_t = get_args(tp)
        return isinstance(value, dict) and all(
            _accepts(key_t, k) and _accepts(value_t, v) for k, v in value.items()
        )
    if tp is Any:
        return True
    return isinstance(value, tp)


COMMON = {"dead_letter": str, "max_attempts": int, "on_dead": str, "max_lateness": float,
          "retry": dict, "events": str, "events_attempts": bool}
"""Settings every kind accepts (see :class:`~tocsin.domain.ChannelSpec`)."""


@functools.cache
def _shape(cls: type) -> tuple[dict[str, Any], tuple[dataclasses.Field[Any], ...]]:
    """A config dataclass's type hints and fields (resolving the hints took a millisecond,
    most of a webhook channel's build)."""
    return typing.get_type_hints(cls), dataclasses.fields(cls)


def parse_config(cls: type[T], config: dict[str, Any]) -> T:
    """``cls(**config)`` after checking names and types; ValidationError names ``config.<x>``.
    The :data:`COMMON` settings are checked here and not passed to ``cls``."""
    from tocsin.validation.terms import check_channel_terms

    check_channel_terms(config)
    config = dict(config)
    for name, tp in COMMON.items():
        if name in config:
            value = config.pop(name)
            if name == "on_dead" and value not in OnDead.__members__.values():
                raise ValidationError("config.on_dead",
                                      f"must be {' or '.join(OnDead)}, not {value!r}")
            if name in ("max_lateness", "retry"):
                continue  # checked by check_channel_terms
            if not _accepts(tp, value) or (tp is int and value < 1):
                raise ValidationError(
                    f"config.{name}",
                    f"must be a {'positive ' if tp is int else ''}{tp.__name__}, not {value!r}",
                )
    hints, fields = _shape(typing.cast(Any, cls))  # a class is hashable; mypy cannot tell
    names = {f.name for f in fields}
    for name in config:
        if name not in names:
            raise ValidationError(
                f"config.{name}", f"unknown setting; known: {sorted(names | set(COMMON))}"
            )
    for f in fields:
        if f.name not in config:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise ValidationError(f"config.{f.name}", "is required")
            continue
        if not _accepts(hints[f.name], config[f.name]):
            raise ValidationError(
                f"config.{f.name}", f"must be {hints[f.name]}, not {config[f.name]!r}"
            )
    value = cls(**config)
    check = getattr(value, "check", None)
    if check is not None:
        check()
    return value

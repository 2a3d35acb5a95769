"""Validators behind the schema's leniency hints and its open tagged unions.

- ``x-deserialize-default-on-error``: a malformed optional field counts as absent
  (ACP-V2.md §10), so one bad marker cannot fail a whole ``initialize``.
- ``x-deserialize-skip-invalid-items``: invalid items of such a list are dropped,
  the valid ones kept.
- ``route``: the callable discriminator of an open union.  A *known* tag selects
  its own model, so a malformed known variant is a validation error; an unknown
  tag selects the ``Unknown*`` model, which keeps the whole payload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ValidationError, ValidatorFunctionWrapHandler, WrapValidator

from ._base import UNSET

__all__ = ["DEFAULT_ON_ERROR", "SKIP_INVALID_ITEMS", "route"]


def _default_on_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError:
        return UNSET


def _first_index(loc: tuple[Any, ...]) -> int | None:
    return next((part for part in loc if isinstance(part, int)), None)


def _skip_invalid_items(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    try:
        return handler(value)
    except ValidationError as exc:
        if not isinstance(value, list):
            raise
        bad = {_first_index(tuple(e["loc"])) for e in exc.errors()}
        if None in bad:
            raise
        return handler([item for i, item in enumerate(value) if i not in bad])


DEFAULT_ON_ERROR = WrapValidator(_default_on_error)
SKIP_INVALID_ITEMS = WrapValidator(_skip_invalid_items)


def route(
    key: str, attr: str, known: dict[str, str], *, other: str | None, missing: str | None
) -> Callable[[Any], str | None]:
    """A discriminator: the tag at ``key`` (``attr`` on a model) names the member."""

    def choose(value: Any) -> str | None:
        if isinstance(value, dict):
            tag = value.get(key)
        elif isinstance(value, BaseModel):
            tag = getattr(value, attr, None)
        else:
            return None
        if tag is None or tag is UNSET:
            return missing
        found = known.get(tag) if isinstance(tag, str) else None
        return found if found is not None else other

    return choose

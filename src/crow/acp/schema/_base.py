"""The base of every ACP wire model, and the one ``UNSET`` sentinel.

ACP patch fields are tri-state (ACP-V2.md §1, §8.1): omitted keeps the stored
value, ``null`` clears it, a value replaces it.  A field that was not given holds
``UNSET`` (pydantic's ``MISSING`` sentinel), which dumps leave out, so a model
parsed from the wire dumps back to the same keys it came with.
"""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel, ConfigDict, TypeAdapter

try:  # pydantic >= 2.14 exports the sentinel; 2.12-2.13 keep it experimental
    from pydantic import MISSING  # type: ignore[attr-defined,unused-ignore]
except ImportError:  # pragma: no cover - depends on the installed pydantic
    from pydantic.experimental.missing_sentinel import MISSING

UNSET = MISSING
#: The annotation of a field that may be ``UNSET``: ``content: list[X] | UNSET_T``.
UNSET_T = MISSING

__all__ = ["UNSET", "UNSET_T", "AcpModel", "adapter", "is_set"]


def is_set(value: Any) -> bool:
    """True unless ``value`` is ``UNSET`` (``None`` counts as set: it means "clear")."""
    return value is not MISSING


class AcpModel(BaseModel):
    """Wire model: camelCase on the wire, snake_case in Python, unknown fields kept."""

    model_config = ConfigDict(
        extra="allow",
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        # Build validators on first use: an agent touches a few dozen of ~250 models,
        # and building all of them at import costs a quarter second of start-up.
        defer_build=True,
    )

    def model_post_init(self, context: Any, /) -> None:
        # With defer_build a class whose instances were made by a parent's
        # validator is never built itself, and dumping it then fails: build it.
        cls = type(self)
        if not cls.__pydantic_complete__:
            cls.model_rebuild()

    def to_wire(self) -> dict[str, Any]:
        """The JSON object for this model: camelCase keys, unset fields left out."""
        return self.model_dump(mode="json", by_alias=True)


@functools.cache
def adapter(tp: Any) -> TypeAdapter[Any]:
    """The validator for a wire type (a model or a union), built once, on first use."""
    return TypeAdapter(tp)

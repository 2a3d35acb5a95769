"""``ConfigError`` and the checks of single values: each says the file, the key and
what is expected, so that every reader of a table words its errors the same way."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConfigError",
    "as_bool",
    "as_fraction",
    "as_non_negative",
    "as_opt_str",
    "as_positive",
    "as_positive_int",
    "as_str",
    "as_table",
]


class ConfigError(Exception):
    """The config file (or an override) is wrong; the message says where and how."""

    def __init__(self, source: str, key: str, expected: str, got: Any = None) -> None:
        got_text = "" if got is None else f", got {got!r}"
        super().__init__(f"{source}: {key}: expected {expected}{got_text}")


def as_table(source: str, key: str, value: Any) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ConfigError(source, key, "a table", value)
    return value


def as_str(source: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise ConfigError(source, key, "a non-empty string", value)
    return value


def as_opt_str(source: str, key: str, value: Any) -> str | None:
    return None if value is None else as_str(source, key, value)


def as_bool(source: str, key: str, value: Any) -> bool:
    if type(value) is not bool:
        raise ConfigError(source, key, "true or false", value)
    return value


def as_positive_int(source: str, key: str, value: Any) -> int:
    if type(value) is not int or value <= 0:
        raise ConfigError(source, key, "a positive integer", value)
    return value


def as_positive(source: str, key: str, value: Any) -> float:
    if type(value) not in (int, float) or value <= 0:
        raise ConfigError(source, key, "a positive number", value)
    return float(value)


def as_fraction(source: str, key: str, value: Any, *, zero: bool) -> float:
    """A similarity threshold: a number up to 1, from 0 (``zero``) or above it."""
    low_ok = type(value) in (int, float) and (value >= 0 if zero else value > 0)
    if not low_ok or value > 1:
        expected = "a number from 0 to 1" if zero else "a number above 0, at most 1"
        raise ConfigError(source, key, expected, value)
    return float(value)


def as_non_negative(source: str, key: str, value: Any) -> float:
    if type(value) not in (int, float) or value < 0:
        raise ConfigError(source, key, "a non-negative number", value)
    return float(value)

"""PostgreSQL locations: telling one from a SQLite file's path, and showing one
without its password."""

from __future__ import annotations

import re

__all__ = ["is_postgres_url", "redact_url"]


def is_postgres_url(location: object) -> bool:
    return isinstance(location, str) and location.startswith(("postgresql://", "postgres://"))


def redact_url(url: str) -> str:
    """A database URL without its password, for messages."""
    return re.sub(r"(://[^:/@]+):[^@]*@", r"\1:***@", url)

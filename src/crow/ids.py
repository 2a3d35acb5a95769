"""Ids and timestamps as Crow writes them: ``new_id("sess")`` → ``sess_<16 hex>``,
``now()`` → an ISO 8601 UTC time to the millisecond, ending in ``Z``."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

__all__ = ["new_id", "now"]


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:16]}"


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")

"""The params of the ACP session methods, checked, and the shapes of their answers.

A bad value is refused with ``-32602`` naming the field and what it takes: paths
must be absolute, storable (no NUL, valid UTF-8) and, for a new session, existing
directories; a replay cursor is ``start`` or Crow's own ``_crow/after``.
"""

from __future__ import annotations

import os
from typing import Any

from crow.acp import InvalidParams, schema
from crow.config import Config
from crow.extensions import AFTER_CURSOR, JUDGE_OF, SEQ, STATE, STOP_REASON, VERDICT
from crow.models.router import ModelRouter
from crow.store.db import SessionRecord

__all__ = [
    "SUPPORTED_REPLAY",
    "absolute",
    "config_options",
    "directories",
    "existing_directory",
    "replay_cursor",
    "session_info",
]

#: The replay cursor types a resume takes ("start": the whole log).
SUPPORTED_REPLAY = ("start", AFTER_CURSOR)


def absolute(path: Any, field: str) -> str:
    if not isinstance(path, str) or not os.path.isabs(path) or not _storable(path):
        raise InvalidParams(
            f"{field} must be an absolute path, got {path!r}", data={field: ascii(path)}
        )
    return os.path.normpath(path)


def existing_directory(path: str, field: str) -> str:
    """A new session's directories must exist: a typo would otherwise be stored
    and confine its tools to nothing."""
    if not os.path.isdir(path):
        raise InvalidParams(f"{field} {path} is not an existing directory", data={field: path})
    return path


def _storable(text: str) -> bool:
    """No NUL and valid UTF-8 (a lone surrogate cannot be stored or sent back)."""
    if "\0" in text:
        return False
    try:
        text.encode()
    except UnicodeEncodeError:
        return False
    return True


def directories(value: Any) -> list[str]:
    if value in (schema.UNSET, None):
        return []
    return [absolute(p, "additionalDirectories") for p in value]


def replay_cursor(replay: Any) -> int | None:
    """Replay the updates after this seq (0: from the start); None: no replay."""
    if replay in (schema.UNSET, None):
        return None
    kind = getattr(replay, "type", None)
    if kind == "start":
        return 0
    seq = (replay.model_extra or {}).get("seq") if kind == AFTER_CURSOR else None
    if type(seq) is not int or seq < 0:
        raise InvalidParams(
            f"Unsupported replay cursor {kind!r}: this agent supports {list(SUPPORTED_REPLAY)}"
            f' ({AFTER_CURSOR} takes "seq", the last params._meta["{SEQ}"] seen)',
            data={"replayFrom": kind},
        )
    return seq


def session_info(record: SessionRecord) -> schema.SessionInfo:
    """A stored session as ``session/list`` shows it."""
    info = schema.SessionInfo(session_id=record.id, cwd=record.cwd, updated_at=record.updated_at)
    if record.title:
        info.title = record.title
    if record.additional_directories:
        info.additional_directories = record.additional_directories
    meta: dict[str, Any] = {STATE: record.state}
    if record.stop_reason:
        meta[STOP_REASON] = record.stop_reason
    if isinstance(verdict := record.config.get("lastVerdict"), dict):
        meta[VERDICT] = verdict
    judged = record.config.get("judgeOf")
    if isinstance(judged, str):  # a judge session: crow sessions hides it by default
        meta[JUDGE_OF] = judged
    info.meta = meta
    return info


def config_options(
    config: Config, router: ModelRouter, model: str
) -> list[schema.SessionConfigOption]:
    """A session's config options: the ``model`` select, with ``model`` current."""
    options = [
        schema.SessionConfigSelectOption(
            value=name, name=name, description=_described(router.spec(name))
        )
        for name in config.models
    ]
    return [
        schema.SelectSessionConfigOption(
            config_id="model",
            name="Model",
            category="model",
            current_value=model,
            options=options,
            description="The model that answers; others take over on failure",
        )
    ]


def _described(spec: Any) -> str:
    caps = ", ".join(sorted(spec.capabilities)) or "text only"
    return f"{spec.model_id} ({caps}; {spec.context_window} tokens)"

"""How ``crow run``, ``crow chat`` and ``crow sessions`` end when the agent fails
them: one line on stderr and the exit code, the same for the three."""

from __future__ import annotations

import sys

from crow.acp import AcpError
from crow.acp.errors import RESOURCE_NOT_FOUND

from .connect import AgentUnavailable
from .session_ids import AmbiguousSession

__all__ = [
    "EXIT_CONNECTION",
    "EXIT_NO_SESSION",
    "EXIT_USAGE",
    "FAILURES",
    "no_such_session",
    "say_failure",
]

EXIT_USAGE, EXIT_CONNECTION, EXIT_NO_SESSION = 2, 7, 10
#: What ends a client command with ``say_failure``.
FAILURES = (AgentUnavailable, AmbiguousSession, AcpError, ConnectionError)


def say_failure(exc: BaseException, session: str | None) -> int:
    """Say why the command ended (``session``: its --session, if any); its exit code."""
    if isinstance(exc, AgentUnavailable):
        line, code = str(exc), EXIT_CONNECTION
    elif isinstance(exc, AmbiguousSession):
        line, code = str(exc), EXIT_USAGE
    elif no_such_session(exc, session):
        line, code = f"no session {session} (crow sessions lists them)", EXIT_NO_SESSION
    else:
        line = getattr(exc, "message", None) or str(exc) or "the agent went away"
        code = EXIT_CONNECTION
    print(f"crow: {line}", file=sys.stderr)
    return code


def no_such_session(exc: BaseException, session: str | None) -> bool:
    """The agent answered ``--session`` with -32002: there is no such session."""
    return bool(session) and getattr(exc, "code", None) == RESOURCE_NOT_FOUND

"""Crow's own names on the ACP wire, shared by the agent and the line client.

Both are extensions the protocol allows: other clients ignore them.
"""

__all__ = [
    "FROM",
    "MAX_VERDICT_CHARS",
    "POST_VERDICT",
    "RECALLED",
    "TURN_ENDED",
    "VERDICT",
    "VERDICTS",
    "VERIFY",
    "WAIT_OVER",
]

#: A custom session update, logged before ``idle`` when a turn ends other than
#: ``end_turn`` (``stopReason``, ``error``): a replay has no state changes, and
#: this keeps in the history how the turn ended.
TURN_ENDED = "_crow/turnEnded"

#: ``_meta`` key of a live ``notice`` saying that the wait an earlier notice
#: named (tool servers starting, a retry, a model loading) is over.
WAIT_OVER = "crow/waitOver"

#: ``_meta`` key (true) of the ``tool_call_update`` that shows the memories Crow
#: recalled into a turn by itself (not a tool call the model made).
RECALLED = "crow/recalled"

#: A client's request (params ``sessionId``, ``text``, ``verdict``) that puts a
#: judge's verdict into a live session: an ``agent_message`` with ``text`` and
#: ``_meta[VERDICT]``, sent to every watcher and replayed (crow.orchestra.judge).
POST_VERDICT = "_crow/verdict"
VERDICT = "crow/verdict"
VERDICTS = ("pass", "fail", "unknown")  # the values of _meta[VERDICT]["verdict"]
MAX_VERDICT_CHARS = 2000  # the longest ``text`` of a verdict

#: ``_meta`` key of ``session/new`` and ``session/resume``: true (or an object with
#: ``maxRounds``, ``rubric``, ``check``) has Crow's own judge verify each turn of the
#: session (crow.orchestra.resident); false stops it.
VERIFY = "crow/verify"

#: ``_meta`` key of a prompt (and so of its ``user_message``) that a program, not a
#: person, sent: "judge" for the judge's follow-up prompts.
FROM = "crow/from"

"""Crow's own names on the ACP wire, shared by the agent and the line client.

Both are extensions the protocol allows: other clients ignore them.
"""

__all__ = [
    "APPROVED",
    "BACKGROUND",
    "FROM",
    "INSERT",
    "JUDGE_OF",
    "JUDGING",
    "MAX_VERDICT_CHARS",
    "POST_JUDGING",
    "POST_VERDICT",
    "QUEUE",
    "RECALLED",
    "SCOPE_ARGUMENT",
    "TURN_ENDED",
    "VERDICT",
    "VERDICTS",
    "VERIFIED_ABOVE",
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
#: Taken only from the session's judge; ``_meta[VERDICT]`` then carries
#: ``verifier`` and ``proof`` (crow.verdict_proof).
POST_VERDICT = "_crow/verdict"
VERDICT = "crow/verdict"
VERDICTS = ("pass", "fail", "unknown")  # the values of _meta[VERDICT]["verdict"]
MAX_VERDICT_CHARS = 2000  # the longest ``text`` of a verdict

#: ``_meta`` key of ``session/new`` and ``session/resume``: true (or an object with
#: ``maxRounds``, ``rubric``, ``check``) has Crow's own judge verify each turn of the
#: session (crow.orchestra.resident); false stops it.  In the answer (and in a
#: judge proxy's): ``{"verifier", "key"}``, the key that proves the session's
#: verdicts (crow.verdict_proof).
VERIFY = "crow/verify"

#: ``_meta`` key (true) a judge proxy puts on the ``session/new``, ``load`` and
#: ``resume`` it passes on: the session's verifier sits above here, so a key the agent
#: below hands out is not a verifier's (``crow proxy record`` ignores it).
VERIFIED_ABOVE = "crow/verifiedAbove"

#: ``_meta`` key of a prompt (and so of its ``user_message``) that a program, not a
#: person, sent: "judge" for the judge's follow-up prompts.  crow serve keeps it only
#: on the prompts of the session's judge, and ``crow proxy judge`` only on its own.
FROM = "crow/from"

#: ``_meta`` key of a ``session/list`` entry: the session a judge session judges (its
#: reasoning, kept apart); ``crow sessions`` lists judge sessions only with ``--all``.
JUDGE_OF = "crow/judgeOf"

#: ``_meta`` key (true) of a ``session/resume`` by which a client (``crow judge``)
#: becomes the session's judge: the one connection whose ``_crow/verdict`` crow serve
#: takes.  Refused while crow serve's own judge verifies the session.
JUDGING = "crow/judging"

#: ``_meta`` key of a tool (Crow's memory ``remember``): the argument naming the
#: memory scope the call writes to.  Crow asks the person before a call that names
#: one beyond the session's own scopes, and then sends it with ``APPROVED``.
SCOPE_ARGUMENT = "crow/scopeArgument"

#: ``_meta`` key (true) of an MCP tool call the person agreed to (crow.agent.toolrun):
#: a write beyond the session's memory scopes.  Only Crow's tool runner sets it.
APPROVED = "crow/approved"

#: ``_meta`` key of a ``session/prompt`` sent while the session is busy: "queue"
#: (held, inserted after the running turn and the prompts held before it), "steer"
#: (into the running turn: its model sees it at its next call) or "reject" (-32602);
#: ``[session] while_busy`` when absent (crow.agent.queue).
INSERT = "crow/insert"

#: A live session update (never logged): the prompts held now, in the order they
#: will be inserted, ``{"prompts": [{"messageId", "from", "preview", "yours"}]}``;
#: sent to every watcher at each change and after a resume while any are held.
QUEUE = "_crow/queue"

#: ``_meta`` key of a tool result: the id of a process the call started that goes on
#: after it (the terminal's ``start``); the agent lists its terminal in
#: ``state_update.background`` until the process ends.
BACKGROUND = "crow/background"

#: A judge's request (params ``sessionId``, ``turnMessageId``) before it judges a
#: turn: the session shows a tool call, kind ``think``, with ``_meta[JUDGING]`` the
#: turn's id, listed in ``state_update.background`` until the verdict is posted.
POST_JUDGING = "_crow/judging"

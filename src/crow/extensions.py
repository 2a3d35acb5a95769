"""Crow's own names on the wire, each in one place: the one registry of ``crow/*`` and
``_crow/*``.

On ACP: ``_meta`` keys, custom methods and session updates (``_crow/...``) and a
replay cursor type, shared by the agent, the line client and the proxies; other
clients ignore them, as the protocol allows.  On MCP: the ``_meta`` keys of Crow's
built-in tools and of their results, which Crow's tool runner reads (other MCP
hosts ignore them too).  ``tests/unit/test_extensions.py`` fails on a ``crow/``
string written anywhere else in ``src`` (``crow.acp`` aside: it imports nothing of
Crow) and on a name here that nothing uses.
"""

__all__ = [
    "AFTER_CURSOR",
    "APPROVED",
    "BACKGROUND",
    "CLIENT",
    "COMMAND",
    "COMPLETION_TOKENS",
    "CONTENT_TYPE",
    "CWD",
    "DIFF",
    "DROPPED",
    "EXIT_CODE",
    "FROM",
    "HTTP_STATUS",
    "INSERT",
    "JUDGE_OF",
    "JUDGING",
    "LOCATIONS",
    "MAX_VERDICT_CHARS",
    "MEMORY_FORGET",
    "MEMORY_REMEMBER",
    "MEMORY_SEARCH",
    "MODEL",
    "MORE",
    "NEXT",
    "NOTICE",
    "PERMISSION_DESCRIPTION",
    "PERMISSION_TITLE",
    "PID",
    "PLAN_STATUS",
    "POST_JUDGING",
    "POST_VERDICT",
    "PROCESSES",
    "PROCESS_ID",
    "PROCESS_STATUS",
    "PROMPT_TOKENS",
    "QUEUE",
    "RECALLED",
    "REPLAY_FROM",
    "SCOPE_ARGUMENT",
    "SEQ",
    "SIGNAL",
    "STATE",
    "STOP_REASON",
    "TIMED_OUT",
    "TOOL_KIND",
    "TOOL_NAME",
    "TRUNCATED",
    "TURN_ENDED",
    "URL",
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

#: ``_meta`` key of a ``user_message``: the name the client that sent the prompt gave
#: itself in ``initialize`` (``clientInfo.name``).  Shown to say who prompted; any
#: client can call itself anything, so nothing trusts it.
CLIENT = "crow/client"

#: ``_meta`` keys of a ``session/list`` entry: the session's foreground state (``idle``,
#: ``running``, ``requires_action``), its last turn's stop reason, and ``VERDICT`` its
#: last verdict ``{"verdict", "text"}`` (a list is read from the store: unsigned).
STATE = "crow/state"
STOP_REASON = "crow/stopReason"

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


#: A client's memory panel (crow.agent.memory_panel): requests with ``sessionId`` (a
#: session the client has open) that search, add and forget memories in its scopes.
MEMORY_SEARCH = "_crow/memory/search"
MEMORY_REMEMBER = "_crow/memory/remember"
MEMORY_FORGET = "_crow/memory/forget"


# ---- ACP: the session log, replay and the agent's own messages --------------------

#: A replay cursor type (``session/resume``'s ``replayFrom``): ``{"type": AFTER_CURSOR,
#: "seq": N}`` replays the session's updates after the one whose ``SEQ`` is N.
AFTER_CURSOR = "_crow/after"

#: ``_meta`` key of the ``initialize`` answer's ``agentCapabilities``: the replay cursor
#: types the agent takes ("start" and ``AFTER_CURSOR``).
REPLAY_FROM = "crow/replayFrom"

#: ``_meta`` key of every ``session/update`` params a Crow agent sends: the update's
#: place in the session's log, the ``seq`` of an ``AFTER_CURSOR`` on reconnect.
SEQ = "crow/seq"

#: ``_meta`` key of an ``agent_message`` from Crow itself, not the model's words (a
#: retry, a fallback, an interrupted turn): its severity ("info", "warning", "error").
NOTICE = "crow/notice"

#: ``_meta`` key of an ``agent_message`` (and ``usage_update``): the model that wrote it.
MODEL = "crow/model"

#: ``_meta`` keys of a ``usage_update``: the tokens of the model's last answer.
PROMPT_TOKENS = "crow/promptTokens"
COMPLETION_TOKENS = "crow/completionTokens"

#: ``_meta`` key of a ``tool_call_update``: the qualified tool (``server__tool``) it ran.
TOOL_NAME = "crow/tool"

# ---- ACP v1: what v1 has no field for (crow.agent.v1) --------------------------------

#: ``_meta`` key of a v1 plan entry: its v2 status, where v1 has no such status.
PLAN_STATUS = "crow/status"

#: ``_meta`` keys of a v1 ``session/request_permission``: the v2 request's title and
#: description (v1's ``toolCall`` holds the tool call's own title).
PERMISSION_TITLE = "crow/title"
PERMISSION_DESCRIPTION = "crow/description"

# ---- MCP: Crow's built-in tools and their results (crow.servers, crow.tools) --------

#: ``_meta`` key of a tool: its ACP tool kind ("read", "edit", "execute", "search",
#: "fetch", ...), which sets the permission it needs; trusted servers' tools may set it.
TOOL_KIND = "crow/kind"

#: ``_meta`` key of a file tool's result: ``[{"path", "line"?}]``, the files it touched.
LOCATIONS = "crow/locations"

#: ``_meta`` key of a write or edit result: ``{"changes": [...], "patch": <git patch>}``.
DIFF = "crow/diff"

#: ``_meta`` key of a fetch, read or run result: true when its text was cut short.
TRUNCATED = "crow/truncated"

#: ``_meta`` keys of a web ``fetch`` result: the final URL (after redirects), its HTTP
#: status and its media type.
URL = "crow/url"
HTTP_STATUS = "crow/status"
CONTENT_TYPE = "crow/contentType"

#: Process fields, in a terminal tool's result ``_meta`` and in each ``PROCESSES`` row:
#: the process id of the terminal server (``read_output``'s ``process_id``), its OS pid,
#: its command line and absolute working directory.
PROCESS_ID = "crow/id"
PID = "crow/pid"
COMMAND = "crow/command"
CWD = "crow/cwd"

#: Process field: "running" or "exited".
PROCESS_STATUS = "crow/status"

#: Process fields: the exit code (int, None while running or when killed) and the
#: signal that ended it ("SIGTERM", or None).
EXIT_CODE = "crow/exitCode"
SIGNAL = "crow/signal"

#: ``_meta`` key of a ``run`` result: true when the command ran past its timeout.
TIMED_OUT = "crow/timedOut"

#: ``_meta`` keys of a ``read_output`` result: the cursor for the next call, the bytes
#: asked for but gone from the buffer, and the bytes still unread.
NEXT = "crow/next"
DROPPED = "crow/dropped"
MORE = "crow/more"

#: ``_meta`` key of a ``list_processes`` result: a list of the process fields.
PROCESSES = "crow/processes"

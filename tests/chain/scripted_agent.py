"""A scripted raw ACP agent for chain tests: each behaviour a test needs, on cue.

    python scripted_agent.py [--answer-version N|none]

- ``initialize``: answers with the requested version (or ``--answer-version``) and
  an unknown top-level field, which a chain must pass through.
- ``session/new``: ``{"sessionId": "s1"}``; cwd ``/wait`` waits for a cancel.
- ``session/resume``: an update first, then the answer, then one more update.
- ``session/prompt`` by its first text: ``wait`` waits for ``$/cancel_request``
  (then -32800); ``ask`` asks the client ``session/request_permission`` and, if the
  prompt is cancelled meanwhile, withdraws the question; ``ask-cancel`` asks and at
  once withdraws the question itself; ``mcp SERVER`` runs mcp/connect, mcp/message
  (request and notification) and mcp/disconnect toward SERVER and answers with what
  came back; anything else is echoed as one chunk, then end_turn.
- ``_vendor/ping``: -32601 with data.

Every line it reads is appended to $SCRIPTED_AGENT_LOG, if set.
"""

import json
import os
import sys
import threading

lock = threading.Lock()
waiting: dict = {}  # our pending prompt ids -> event set by a cancel
answers: dict = {}  # ids of our requests to the client -> (event, response)
log_path = os.environ.get("SCRIPTED_AGENT_LOG")
args = sys.argv[1:]
answer_version = args[args.index("--answer-version") + 1] if "--answer-version" in args else None
counter = iter(range(1, 1_000_000))


def send(message):
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def reply(rid, result=None, error=None):
    message = {"jsonrpc": "2.0", "id": rid}
    message.update({"error": error} if error else {"result": result})
    send(message)


def update(sid, update):
    send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": sid, "update": update},
        }
    )


def ask(method, params, withdraw_at_once=False):
    rid = f"agent-ask-{next(counter)}"
    event = threading.Event()
    answers[rid] = [event, None]
    send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
    if withdraw_at_once:
        send({"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": rid}})
    return rid, event


def cancelled_error():
    return {"code": -32800, "message": "Request cancelled"}


def prompt(rid, params):
    sid = params.get("sessionId")
    text = (params.get("prompt") or [{}])[0].get("text", "")
    cancel = threading.Event()
    waiting[repr(rid)] = cancel
    try:
        if text == "wait":
            cancel.wait(30)
            return reply(rid, error=cancelled_error())
        if text in ("ask", "ask-cancel"):
            question = {"sessionId": sid, "toolCall": {"toolCallId": "t1"}, "options": []}
            qid, answered = ask("session/request_permission", question, text == "ask-cancel")
            while not answered.is_set():
                if cancel.wait(0.01):
                    send(
                        {
                            "jsonrpc": "2.0",
                            "method": "$/cancel_request",
                            "params": {"requestId": qid},
                        }
                    )
                    answered.wait(10)
                    return reply(rid, error=cancelled_error())
            return reply(rid, {"stopReason": "end_turn", "_meta": {"answer": answers[qid][1]}})
        if text.startswith("mcp "):
            server = text.split()[1]
            seen = {}
            cid = call("mcp/connect", {"serverId": server})
            seen["connect"] = cid
            if "result" in cid:
                connection = cid["result"]["connectionId"]
                seen["message"] = call(
                    "mcp/message",
                    {"connectionId": connection, "method": "tools/list", "params": {}},
                )
                send(
                    {
                        "jsonrpc": "2.0",
                        "method": "mcp/message",
                        "params": {
                            "connectionId": connection,
                            "method": "notifications/initialized",
                        },
                    }
                )
                seen["disconnect"] = call("mcp/disconnect", {"connectionId": connection})
            return reply(rid, {"stopReason": "end_turn", "_meta": {"seen": seen}})
        update(
            sid, {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}}
        )
        reply(rid, {"stopReason": "end_turn"})
    finally:
        waiting.pop(repr(rid), None)


def call(method, params):
    qid, answered = ask(method, params)
    answered.wait(10)
    return answers[qid][1]


def handle(message):
    method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method is None:  # a response to one of our requests
        slot = answers.get(rid)
        if slot:
            slot[1] = message
            slot[0].set()
        return
    if method == "$/cancel_request":
        event = waiting.get(repr(params.get("requestId")))
        if event:
            event.set()
        return
    if method == "initialize":
        version = params.get("protocolVersion")
        result = {
            "info": {"name": "scripted", "version": "1"},
            "_futureInitializeResponseField": True,
        }
        if answer_version != "none":
            result["protocolVersion"] = int(answer_version) if answer_version else version
        return reply(rid, result)
    if method == "session/new":
        if params.get("cwd") == "/wait":
            cancel = threading.Event()
            waiting[repr(rid)] = cancel
            threading.Thread(
                target=lambda: cancel.wait(30) and reply(rid, error=cancelled_error()), daemon=True
            ).start()
            return
        return reply(rid, {"sessionId": "s1", "_meta": {"mcpServers": params.get("mcpServers")}})
    if method == "session/resume":
        update(
            params.get("sessionId"),
            {"sessionUpdate": "agent_message", "content": [{"type": "text", "text": "replayed"}]},
        )
        reply(rid, {"_meta": {"mcpServers": params.get("mcpServers")}})
        update(
            params.get("sessionId"),
            {"sessionUpdate": "agent_message", "content": [{"type": "text", "text": "later"}]},
        )
        return
    if method == "session/prompt":
        return threading.Thread(target=prompt, args=(rid, params), daemon=True).start()
    if rid is not None:
        reply(
            rid, error={"code": -32601, "message": "Method not found", "data": {"method": method}}
        )


for line in sys.stdin:
    if log_path:
        with open(log_path, "a") as log:
            log.write(line)
    handle(json.loads(line))

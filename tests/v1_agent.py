"""A v1-only ACP agent, standard library only, as the agents people have speak: it
answers ``initialize`` with protocol version 1 whatever is asked.

    python v1_agent.py [--no-list]

- ``session/new``, ``session/load`` (replays the session's updates, then answers),
  ``session/list`` (unless ``--no-list``); no ``session/resume``, no close.
- ``session/prompt`` by its text: ``ask`` asks permission for a tool call, then
  says what was chosen (a cancelled question ends the turn ``cancelled``);
  ``wait`` waits for ``session/cancel`` and ends ``cancelled``; ``fail`` answers
  the prompt with an error; anything else: a thought, a plan, a tool call and the
  echo in two chunks without message ids, then ``end_turn``.
"""

import json
import sys
import threading
import uuid

lock = threading.Lock()
sessions: dict[str, list[dict]] = {}  # session id -> the updates sent, for load
cancelled: dict[str, threading.Event] = {}
answers: dict[str, list] = {}  # our request ids -> [event, response]
LIST = "--no-list" not in sys.argv


def send(message):
    with lock:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()


def update(sid, update, record=True):
    if record:
        sessions[sid].append(update)
    send(
        {
            "jsonrpc": "2.0",
            "method": "session/update",
            "params": {"sessionId": sid, "update": update},
        }
    )


def ask(sid, tool_call):
    rid = f"ask-{uuid.uuid4().hex[:8]}"
    event = threading.Event()
    answers[rid] = [event, None]
    options = [
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
    ]
    params = {"sessionId": sid, "toolCall": tool_call, "options": options}
    send({"jsonrpc": "2.0", "id": rid, "method": "session/request_permission", "params": params})
    event.wait()
    return answers.pop(rid)[1]


def chunk(sid, kind, text):
    update(sid, {"sessionUpdate": kind, "content": {"type": "text", "text": text}})


def prompt(rid, params, cancel):
    sid = params["sessionId"]
    text = "".join(b.get("text", "") for b in params["prompt"] if b.get("type") == "text")
    chunk(sid, "user_message_chunk", text)
    stop = "end_turn"
    if text == "ask":
        call = {
            "toolCallId": "call-1",
            "title": "rm -rf build",
            "kind": "execute",
            "status": "pending",
        }
        update(sid, {"sessionUpdate": "tool_call", **call})
        answer = ask(sid, {"toolCallId": "call-1", "title": "rm -rf build", "kind": "execute"})
        outcome = (answer or {}).get("result", {}).get("outcome", {})
        if outcome.get("outcome") == "selected":
            status = "completed" if outcome["optionId"] == "allow" else "failed"
            update(
                sid, {"sessionUpdate": "tool_call_update", "toolCallId": "call-1", "status": status}
            )
            chunk(sid, "agent_message_chunk", f"you chose {outcome['optionId']}")
        else:
            stop = "cancelled"
    elif text == "wait":
        cancel.wait()
        stop = "cancelled"
    elif text == "fail":
        send(
            {
                "jsonrpc": "2.0",
                "id": rid,
                "error": {"code": -32603, "message": "the v1 agent broke"},
            }
        )
        return
    else:
        chunk(sid, "agent_thought_chunk", "thinking")
        entries = [{"content": "echo it", "priority": "high", "status": "completed"}]
        update(sid, {"sessionUpdate": "plan", "entries": entries})
        call = {"toolCallId": f"read-{len(sessions[sid])}", "title": "read notes", "kind": "read"}
        update(sid, {"sessionUpdate": "tool_call", **call, "status": "completed"})
        chunk(sid, "agent_message_chunk", "Echo: ")
        chunk(sid, "agent_message_chunk", text)
    send({"jsonrpc": "2.0", "id": rid, "result": {"stopReason": stop}})


def handle(message):
    method, rid, params = message.get("method"), message.get("id"), message.get("params") or {}
    if method is None:  # an answer to one of our questions
        if rid in answers:
            answers[rid][1] = message
            answers[rid][0].set()
        return
    if method == "initialize":
        caps = {"loadSession": True, "sessionCapabilities": {"list": {}} if LIST else {}}
        result = {
            "protocolVersion": 1,
            "agentCapabilities": caps,
            "agentInfo": {"name": "v1-stdlib-agent", "version": "1.0"},
        }
        send({"jsonrpc": "2.0", "id": rid, "result": result})
    elif method == "session/new":
        sid = f"v1-{uuid.uuid4().hex[:8]}"
        sessions[sid] = []
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessionId": sid}})
    elif method == "session/load":
        sid = params["sessionId"]
        if sid not in sessions:
            error = {"code": -32002, "message": "Resource not found", "data": {"sessionId": sid}}
            send({"jsonrpc": "2.0", "id": rid, "error": error})
            return
        for past in list(sessions[sid]):
            update(sid, past, record=False)
        send({"jsonrpc": "2.0", "id": rid, "result": {}})
    elif method == "session/list" and LIST:
        listed = [{"sessionId": sid, "cwd": "/tmp", "title": f"session {sid}"} for sid in sessions]
        send({"jsonrpc": "2.0", "id": rid, "result": {"sessions": listed}})
    elif method == "session/prompt":
        # Made here, not in the turn's thread: a cancel read right after must find it.
        cancel = cancelled[params.get("sessionId")] = threading.Event()
        threading.Thread(target=prompt, args=(rid, params, cancel), daemon=True).start()
    elif method == "session/cancel":
        event = cancelled.pop(params.get("sessionId"), None)
        if event is not None:
            event.set()
    elif rid is not None:
        error = {"code": -32601, "message": f"Method not found: {method}"}
        send({"jsonrpc": "2.0", "id": rid, "error": error})


for line in sys.stdin:
    if line.strip():
        handle(json.loads(line))

// A session's history in bulk: one session/resume over streamable HTTP (/acp, SSE),
// read as one byte stream.  Chromium hands a page each WebSocket message on its
// own (about 0.2 ms apiece on a busy machine), so a 10,000-update replay over the
// WebSocket takes seconds; the same updates as one SSE stream take a fraction of
// that.  The live session then goes on over the WebSocket from the last crow/seq
// read here (_crow/after), so nothing is missed and nothing shows twice.

const CONNECTION = "Acp-Connection-Id";
const SESSION = "Acp-Session-Id";

async function post(headers, body) {
  const answer = await fetch("/acp", { method: "POST", headers, body: JSON.stringify(body), cache: "no-store" });
  if (!answer.ok) throw new Error(`/acp answered ${answer.status}`);
  return answer;
}

// Replays `params` (a session/resume's) into `onUpdate`; resolves with the resume's
// answer.  Throws when the HTTP way is not open (the caller then replays over the
// WebSocket).
export async function replayOverHttp(token, info, params, onUpdate) {
  const base = { Authorization: `Bearer ${token}`, "Content-Type": "application/json", Accept: "application/json, text/event-stream" };
  const opened = await post(base, { jsonrpc: "2.0", id: 0, method: "initialize", params: { protocolVersion: 2, info, capabilities: {} } });
  const connection = opened.headers.get(CONNECTION);
  if (!connection) throw new Error("no connection id");
  const headers = { ...base, [CONNECTION]: connection, [SESSION]: params.sessionId };
  const abort = new AbortController();
  try {
    const stream = await fetch("/acp", { method: "GET", headers: { ...headers, Accept: "text/event-stream" }, signal: abort.signal, cache: "no-store" });
    if (!stream.ok || !stream.body) throw new Error(`/acp stream answered ${stream.status}`);
    await post(headers, { jsonrpc: "2.0", id: 1, method: "session/resume", params });
    const reader = stream.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) throw new Error("the stream ended before the answer");
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const event = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = event
          .split("\n")
          .filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(line[5] === " " ? 6 : 5))
          .join("\n");
        if (!data) continue;
        const message = JSON.parse(data);
        if (message.method === "session/update") onUpdate(message.params || {});
        else if (message.id === 1 && message.method === undefined) {
          if (message.error) throw Object.assign(new Error(message.error.message || "resume failed"), { code: message.error.code });
          return message.result || {};
        }
      }
    }
  } finally {
    abort.abort();
    fetch("/acp", { method: "DELETE", headers: { Authorization: base.Authorization, [CONNECTION]: connection } }).catch(() => {});
  }
}

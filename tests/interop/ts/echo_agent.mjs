#!/usr/bin/env node
// ACP v2 echo agent on @agentclientprotocol/sdk 2.4.0 (/experimental/v2), stdio.
// Mirrors the Rust quickstart's simple_agent_v2: in-memory sessions, replay from
// start, post-resume state snapshot, immediate prompt ack with {messageId}.
//
//   node echo_agent.mjs [--chunks N] [--delay-ms D] [--idle-after-new] [--plain]
//
// --plain skips our extra validation of every message (acp_validation.mjs), so the
// agent runs as a plain SDK agent would: the benchmark uses it.
//
// stdout carries JSON-RPC only; diagnostics go to stderr.
import { Readable, Writable } from "node:stream";
import { randomUUID } from "node:crypto";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { validatingStream } from "./acp_validation.mjs";

// Nothing but JSON-RPC may reach stdout.
console.log = console.info = console.debug = (...a) => console.error(...a);

function parseArgs(argv) {
  const opts = { chunks: 1, delayMs: 0, idleAfterNew: false, plain: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const num = (name) => {
      const v = Number(argv[++i]);
      if (!Number.isInteger(v) || v < 0) throw new Error(`${name} needs a non-negative integer`);
      return v;
    };
    if (a === "--chunks") opts.chunks = Math.max(1, num(a));
    else if (a === "--delay-ms") opts.delayMs = num(a);
    else if (a === "--idle-after-new") opts.idleAfterNew = true;
    else if (a === "--plain") opts.plain = true;
    else throw new Error(`unknown argument ${a}`);
  }
  return opts;
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2));
} catch (e) {
  process.stderr.write(`echo_agent: ${e.message}\n`);
  process.exit(2);
}

const log = (...a) => process.stderr.write(`echo_agent: ${a.join(" ")}\n`);
const AGENT_INFO = { name: "crow-interop-ts-echo-agent", version: "0.1.0" };

/**
 * @typedef {{ sessionId: string, cwd: string, active: boolean, title?: string,
 *   updatedAt: string, history: Array<object>, lastStopReason?: string,
 *   turn?: { abort: AbortController, done: Promise<void> } }} Session
 */
/** @type {Map<string, Session>} */
const sessions = new Map();

const newId = (prefix) => `${prefix}_${randomUUID()}`;
const now = () => new Date().toISOString();

function activeSession(sessionId) {
  const s = sessions.get(sessionId);
  if (!s || !s.active) throw acp.RequestError.sessionNotFound(sessionId);
  return s;
}

function splitChunks(text, n) {
  const chars = Array.from(text);
  n = Math.max(1, Math.min(n, chars.length));
  const base = Math.floor(chars.length / n);
  const extra = chars.length % n;
  const out = [];
  let pos = 0;
  for (let i = 0; i < n; i++) {
    const len = base + (i < extra ? 1 : 0);
    out.push(chars.slice(pos, pos + len).join(""));
    pos += len;
  }
  return out;
}

function sleep(ms, signal) {
  return new Promise((resolve) => {
    if (ms <= 0 || signal.aborted) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal.removeEventListener("abort", done);
      resolve();
    }
    signal.addEventListener("abort", done, { once: true });
  });
}

const update = (client, sessionId, u) =>
  client.notify(acp.methods.client.session.update, { sessionId, update: u });

/** Runs one turn after the prompt response has been queued. */
async function runTurn(client, session, userMessageId, prompt, text, signal) {
  const { sessionId } = session;
  // Let the SDK queue the {messageId} response first.
  await new Promise((r) => setImmediate(r));
  await update(client, sessionId, {
    sessionUpdate: "user_message",
    messageId: userMessageId,
    content: prompt,
  });
  session.history.push({ sessionUpdate: "user_message", messageId: userMessageId, content: prompt });
  await update(client, sessionId, { sessionUpdate: "state_update", state: "running" });

  const agentMessageId = newId("msg_agent");
  const reply = `Echo: ${text}`;
  let sent = "";
  for (const [i, chunk] of splitChunks(reply, opts.chunks).entries()) {
    if (i > 0) await sleep(opts.delayMs, signal);
    if (signal.aborted) break;
    await update(client, sessionId, {
      sessionUpdate: "agent_message_chunk",
      messageId: agentMessageId,
      content: { type: "text", text: chunk },
    });
    sent += chunk;
  }
  let stopReason = "cancelled";
  if (!signal.aborted) {
    await update(client, sessionId, {
      sessionUpdate: "agent_message",
      messageId: agentMessageId,
      content: [{ type: "text", text: reply }],
    });
    stopReason = "end_turn";
  }
  if (sent) {
    session.history.push({
      sessionUpdate: "agent_message",
      messageId: agentMessageId,
      content: [{ type: "text", text: sent }],
    });
  }
  session.updatedAt = now();
  session.lastStopReason = stopReason;
  await update(client, sessionId, { sessionUpdate: "state_update", state: "idle", stopReason });
}

/** Cancels the running turn (if any) and waits until its idle was sent. */
async function cancelTurn(session) {
  const turn = session.turn;
  if (!turn) return;
  turn.abort.abort();
  await turn.done;
}

const app = acp
  .agent({ name: "crow-interop-ts-echo-agent" })
  .onRequest(acp.methods.agent.initialize, () => ({
    protocolVersion: acp.PROTOCOL_VERSION,
    info: AGENT_INFO,
    capabilities: { session: {} },
  }))
  .onRequest(acp.methods.agent.session.new, ({ params, client }) => {
    if (params.additionalDirectories?.length) {
      throw acp.RequestError.invalidParams({ field: "additionalDirectories" }, "not supported");
    }
    acp.assertSupportedMcpServers(params.mcpServers, undefined);
    const sessionId = newId("sess");
    sessions.set(sessionId, {
      sessionId,
      cwd: params.cwd,
      active: true,
      updatedAt: now(),
      history: [],
    });
    if (opts.idleAfterNew) {
      setImmediate(() => {
        void update(client, sessionId, { sessionUpdate: "state_update", state: "idle" }).catch(() => {});
      });
    }
    return { sessionId };
  })
  .onRequest(acp.methods.agent.session.list, ({ params }) => {
    if (params.cursor != null) {
      throw acp.RequestError.invalidParams({ cursor: params.cursor }, "invalid cursor");
    }
    const list = [...sessions.values()]
      .filter((s) => params.cwd == null || s.cwd === params.cwd)
      .map((s) => ({
        sessionId: s.sessionId,
        cwd: s.cwd,
        ...(s.title !== undefined ? { title: s.title } : {}),
        updatedAt: s.updatedAt,
      }));
    return { sessions: list };
  })
  .onRequest(acp.methods.agent.session.resume, async ({ params, client }) => {
    const s = sessions.get(params.sessionId);
    if (!s) throw acp.RequestError.sessionNotFound(params.sessionId);
    if (params.cwd !== s.cwd) {
      throw acp.RequestError.invalidParams({ cwd: params.cwd }, "cwd does not match the session");
    }
    if (params.additionalDirectories?.length) {
      throw acp.RequestError.invalidParams({ field: "additionalDirectories" }, "not supported");
    }
    acp.assertSupportedMcpServers(params.mcpServers, undefined);
    if (params.replayFrom != null && !acp.ReplayFrom.isStart(params.replayFrom)) {
      throw acp.RequestError.invalidParams(
        { replayFrom: params.replayFrom },
        "unsupported replayFrom cursor",
      );
    }
    if (s.turn) {
      throw acp.RequestError.invalidParams({ sessionId: s.sessionId }, "session has foreground work");
    }
    s.active = true;
    if (params.replayFrom != null) {
      for (const entry of s.history) await update(client, s.sessionId, entry);
    }
    // [T]: current foreground-state snapshot after replay, before the response.
    await update(client, s.sessionId, { sessionUpdate: "state_update", state: "idle" });
    return {};
  })
  .onRequest(acp.methods.agent.session.close, async ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (s) {
      await cancelTurn(s); // idle/cancelled goes out before this response
      s.active = false;
    }
    return {};
  })
  .onRequest(acp.methods.agent.session.prompt, ({ params, client }) => {
    const s = activeSession(params.sessionId);
    if (s.turn) {
      throw acp.RequestError.invalidParams(
        { sessionId: s.sessionId, reason: "busy" },
        "session already has foreground work",
      );
    }
    for (const block of params.prompt) {
      if (!acp.ContentBlock.isText(block) && !acp.ContentBlock.isResourceLink(block)) {
        throw acp.RequestError.invalidParams({ type: block.type }, "content type not advertised");
      }
    }
    const text = params.prompt
      .filter((b) => acp.ContentBlock.isText(b))
      .map((b) => b.text)
      .join("");
    if (s.title === undefined) s.title = text.slice(0, 80);
    const userMessageId = newId("msg_user");
    const abort = new AbortController();
    const turn = { abort, done: Promise.resolve() };
    turn.done = runTurn(client, s, userMessageId, params.prompt, text, abort.signal)
      .catch((e) => log("turn failed:", e?.stack ?? e))
      .finally(() => {
        if (s.turn === turn) s.turn = undefined;
      });
    s.turn = turn;
    return { messageId: userMessageId };
  })
  .onNotification(acp.methods.agent.session.cancel, ({ params }) => {
    const s = sessions.get(params.sessionId);
    if (s?.turn) s.turn.abort.abort();
  });

const raw = acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
// Our own outgoing traffic must satisfy the SDK schemas; a violation is a bug here.
const stream = opts.plain ? raw : validatingStream(raw, (dir, err) => {
  if (dir === "outgoing") {
    log("BUG, invalid outgoing message:", err);
    process.exit(70);
  }
  // Invalid incoming messages are answered by the SDK (-32602 etc.); just note them.
  log("invalid incoming message:", err);
});
const connection = app.connect(stream);
void connection.closed.then(() => {
  const reason = connection.signal.reason;
  if (reason && !(reason instanceof Error && reason.message === "ACP connection closed")) {
    log("connection closed:", reason?.stack ?? reason);
  }
  process.exit(0);
});

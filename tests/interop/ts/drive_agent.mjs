#!/usr/bin/env node
// ACP v2 client driver on @agentclientprotocol/sdk 2.4.0 (/experimental/v2).
//
//   node drive_agent.mjs --command "CMD ARGS" [--prompt TEXT] [--timeout-ms MS]
//
// Spawns the agent, runs initialize -> session/new -> session/prompt -> wait for
// running..idle -> session/resume (replay from start) -> session/close, and prints
// ONE JSON object on stdout: {"ok": true, ...} or {"ok": false, "error": ...}
// (exit 1). Every message in both directions is schema-validated; any failure,
// including one the SDK would only log, fails the run.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { validatingStream } from "./acp_validation.mjs";

const DRIVER_INFO = { name: "crow-interop-ts-driver", version: "0.1.0" };

let finished = false;
let child;
let timer;
const log = (...a) => process.stderr.write(`drive_agent: ${a.join(" ")}\n`);

function finish(result, code) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  try {
    child?.stdin?.end();
  } catch {}
  const killer = setTimeout(() => child?.kill("SIGKILL"), 1000);
  killer.unref();
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(code));
}
function fail(error) {
  const msg =
    error?.name === "ZodError" && Array.isArray(error.issues)
      ? `schema validation failed: ${error.issues.map((i) => `${i.path.join(".") || "<root>"}: ${i.message}`).join("; ")}`
      : error instanceof Error
        ? error.message
        : String(error);
  const data = error && typeof error === "object" && "code" in error ? { code: error.code, data: error.data } : {};
  finish({ ok: false, error: msg, ...data }, 1);
}

// The SDK reports some protocol violations only via console.error/warn
// ("Error handling notification", "Invalid message", "Got response to unknown
// request"). Turn every such report into a failure, and keep stdout clean.
for (const name of ["error", "warn"]) {
  console[name] = (...args) => {
    const text = args
      .map((a) => (typeof a === "string" ? a : a instanceof Error ? a.message : JSON.stringify(a)))
      .join(" ");
    log(`SDK ${name}: ${text}`);
    fail(`SDK reported: ${text}`);
  };
}
console.log = console.info = console.debug = (...a) => log(a.join(" "));
process.on("uncaughtException", (e) => fail(e));
process.on("unhandledRejection", (e) => fail(e));

function parseArgs(argv) {
  const opts = { command: undefined, prompt: "hello", timeoutMs: 20000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--command") opts.command = argv[++i];
    else if (a === "--prompt") opts.prompt = argv[++i];
    else if (a === "--timeout-ms") opts.timeoutMs = Number(argv[++i]);
    else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.command || !opts.command.trim()) throw new Error("--command is required");
  if (opts.prompt === undefined) throw new Error("--prompt needs a value");
  if (!(opts.timeoutMs > 0)) throw new Error("--timeout-ms needs a positive number");
  return opts;
}

/** Fails on anything on the agent's stdout that is not one JSON-RPC object per line. */
async function checkStdoutLines(readable) {
  const decoder = new TextDecoder();
  let buf = "";
  const checkLine = (line) => {
    const t = line.trim();
    if (!t) return;
    let v;
    try {
      v = JSON.parse(t);
    } catch {
      return fail(`agent stdout: non-JSON line: ${t.slice(0, 200)}`);
    }
    if (Array.isArray(v)) return fail("agent stdout: JSON-RPC batch (array) sent by agent");
    if (typeof v !== "object" || v === null) return fail(`agent stdout: not a JSON object: ${t.slice(0, 200)}`);
  };
  for await (const chunk of readable) {
    buf += decoder.decode(chunk, { stream: true });
    let nl;
    while ((nl = buf.indexOf("\n")) >= 0) {
      checkLine(buf.slice(0, nl));
      buf = buf.slice(nl + 1);
    }
  }
  if (buf.trim()) fail(`agent stdout: unterminated last line: ${buf.slice(0, 200)}`);
}

/** Text projection (§8.1) of agent messages, in first-seen order. */
function projectAgentText(updates) {
  const order = [];
  const content = new Map();
  const ensure = (id) => {
    if (!content.has(id)) {
      order.push(id);
      content.set(id, []);
    }
    return content.get(id);
  };
  for (const u of updates) {
    if (acp.SessionUpdate.isAgentMessageChunk(u)) ensure(u.messageId).push(u.content);
    else if (acp.SessionUpdate.isAgentMessage(u)) {
      ensure(u.messageId);
      if (u.content !== undefined) content.set(u.messageId, u.content ?? []);
    }
  }
  return order
    .flatMap((id) => content.get(id))
    .filter((b) => acp.ContentBlock.isText(b))
    .map((b) => b.text)
    .join("");
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  timer = setTimeout(() => fail(`timeout after ${opts.timeoutMs} ms`), opts.timeoutMs);

  const [cmd, ...args] = opts.command.trim().split(/\s+/);
  child = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"] });
  child.on("error", (e) => fail(`cannot start agent: ${e.message}`));
  child.on("exit", (code, signal) => {
    if (!finished) fail(`agent exited early (code ${code}, signal ${signal})`);
  });
  child.stdin.on("error", () => {}); // EPIPE surfaces as a connection failure

  const [forSdk, forCheck] = Readable.toWeb(child.stdout).tee();
  void checkStdoutLines(forCheck).catch((e) => fail(e));
  const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), forSdk);
  const stream = validatingStream(raw, (dir, err) => fail(`${dir} message invalid: ${err}`));

  // One projection for the whole connection, installed before session/new (§7.2).
  let sessionId;
  const early = []; // updates that arrive before the session/new response
  let phase = "setup"; // setup -> live -> afterIdle -> replay -> closing -> closed
  let awaitingStart = false;
  let started = false;
  const liveUpdates = [];
  const replayUpdates = [];
  let stopReason;
  let resolveIdle;
  const idle = new Promise((r) => (resolveIdle = r));

  const onUpdate = (notification) => {
    const u = notification.update;
    if (sessionId === undefined) {
      early.push(notification);
      return;
    }
    if (notification.sessionId !== sessionId) return fail(`update for unknown session ${notification.sessionId}`);
    if (phase === "live" || phase === "setup") {
      const isState = acp.SessionUpdate.isStateUpdate(u);
      if (isState && awaitingStart && (acp.StateUpdate.isRunning(u) || acp.StateUpdate.isRequiresAction(u))) {
        started = true;
        awaitingStart = false;
      } else if (isState && started && acp.StateUpdate.isIdle(u)) {
        stopReason = u.stopReason;
        phase = "afterIdle";
        resolveIdle();
        return;
      }
      liveUpdates.push(u);
    } else if (phase === "replay") {
      replayUpdates.push(u);
    } else if (phase === "closed") {
      fail(`update after session/close response: ${u.sessionUpdate}`);
    }
  };

  const app = acp
    .client({ name: DRIVER_INFO.name })
    .onNotification(acp.methods.client.session.update, ({ params }) => onUpdate(params))
    .onRequest(acp.methods.client.session.requestPermission, () => ({
      outcome: { outcome: "cancelled" },
    }));

  return app.connectWith(stream, async (agent) => {
    const initialize = await agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      info: DRIVER_INFO,
      capabilities: {},
    });
    const sessionCaps = initialize.capabilities?.session;
    if (sessionCaps == null || typeof sessionCaps !== "object") {
      throw new Error("agent did not advertise capabilities.session");
    }

    const cwd = process.cwd();
    const session = await agent.buildSession(cwd).start();
    sessionId = session.sessionId;
    for (const n of early.splice(0)) onUpdate(n);

    phase = "live";
    awaitingStart = true;
    const promptResponse = await session.prompt([{ type: "text", text: opts.prompt }]);
    await idle;

    phase = "replay";
    const resumeResponse = await agent.request(acp.methods.agent.session.resume, {
      sessionId,
      cwd,
      mcpServers: [],
      replayFrom: { type: "start" },
    });
    phase = "closing";
    await agent.request(acp.methods.agent.session.close, { sessionId });
    phase = "closed";
    session.dispose();
    // Give a misbehaving agent a moment to send something after close.
    await new Promise((r) => setTimeout(r, 50));

    return {
      ok: true,
      initialize,
      sessionId,
      promptResponse,
      liveUpdates,
      stopReason: stopReason ?? null,
      replayUpdates,
      resumeResponse,
      agentText: projectAgentText(liveUpdates),
    };
  });
}

main().then(
  (result) => finish(result, 0),
  // Briefly defer so an agent crash is reported by the child's exit handler
  // ("agent exited early ...") rather than as a bare "ACP connection closed".
  (e) => setTimeout(() => fail(e), 200),
);

// Shared by the client drivers (drive_agent.mjs, drive_http.mjs, drive_v1.mjs):
// one run per process, which ends by printing ONE JSON object on stdout
// ({"ok": true, ...} exit 0, or {"ok": false, "error": ...} exit 1), plus the
// v2 session flow and its text projection.
import { spawn } from "node:child_process";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { validatingStream } from "./acp_validation.mjs";

let name = "drive";
let describeError = errorMessage;
let cleanup = () => {};
let finished = false;
let timer;

// Sets the stderr prefix and, optionally, how fail() turns an error into its message.
export function configureDriver(driverName, options = {}) {
  name = driverName;
  if (options.describeError) describeError = options.describeError;
}

// Writes one line to stderr, prefixed with the driver's name.
export function log(...a) {
  process.stderr.write(`${name}: ${a.join(" ")}\n`);
}

// True once the run's result has been printed (or is being printed).
export function isFinished() {
  return finished;
}

// Fails the run with "timeout after MS ms" unless it has finished by then.
export function startTimeout(ms) {
  timer = setTimeout(() => fail(`timeout after ${ms} ms`), ms);
}

// Prints the run's one JSON result on stdout and exits with code (later calls do nothing).
export function finish(result, code) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  cleanup();
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(code));
}

// One-line message for an error: its zod issues, its Error message, or else fallback(error).
export function errorMessage(error, fallback = String) {
  return error?.name === "ZodError" && Array.isArray(error.issues)
    ? `schema validation failed: ${error.issues.map((i) => `${i.path.join(".") || "<root>"}: ${i.message}`).join("; ")}`
    : error instanceof Error
      ? error.message
      : fallback(error);
}

// Finishes with {"ok": false, "error": ...} (plus a JSON-RPC error's code and data), exit 1.
export function fail(error) {
  const msg = describeError(error);
  const data = error && typeof error === "object" && "code" in error ? { code: error.code, data: error.data } : {};
  finish({ ok: false, error: msg, ...data }, 1);
}

// Turns the SDK's console.error/warn reports and uncaught errors into failures; console.log & co. go to stderr.
export function hookConsole() {
  // The SDK reports some protocol violations only via console.error/warn
  // ("Error handling notification", "Invalid message", "Got response to unknown
  // request", "Skipping SSE payload that is not a JSON object", "Failed to parse
  // SSE JSON payload"). Turn every such report into a failure, and keep stdout clean.
  for (const level of ["error", "warn"]) {
    console[level] = (...args) => {
      const text = args
        .map((a) => (typeof a === "string" ? a : a instanceof Error ? a.message : JSON.stringify(a)))
        .join(" ");
      log(`SDK ${level}: ${text}`);
      fail(`SDK reported: ${text}`);
    };
  }
  console.log = console.info = console.debug = (...a) => log(a.join(" "));
  process.on("uncaughtException", (e) => fail(e));
  process.on("unhandledRejection", (e) => fail(e));
}

// Spawns the agent command (stdin/stdout piped); fails if it cannot start or exits before the result.
/** command: words split at whitespace, or a JSON array of argv (for quoted arguments). */
export function spawnAgent(command) {
  const argv = command.trim().startsWith("[") ? JSON.parse(command) : command.trim().split(/\s+/);
  const [cmd, ...args] = argv;
  const child = spawn(cmd, args, { stdio: ["pipe", "pipe", "inherit"] });
  cleanup = () => {
    try {
      child.stdin?.end();
    } catch {}
    const killer = setTimeout(() => child.kill("SIGKILL"), 1000);
    killer.unref();
  };
  child.on("error", (e) => fail(`cannot start agent: ${e.message}`));
  child.on("exit", (code, signal) => {
    if (!finished) fail(`agent exited early (code ${code}, signal ${signal})`);
  });
  child.stdin.on("error", () => {}); // EPIPE surfaces as a connection failure
  return child;
}

// Text projection (§8.1) of v2 agent messages, in first-seen order.
export function projectAgentText(updates) {
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

// Runs the v2 flow (initialize, new, prompt, idle, resume with replay, close) over raw, validated; resolves to the result.
// newSessionMeta: session/new's _meta; untilAfterIdle(update): after the idle, wait for an update it accepts
// (a judge's verdict comes after the worker's idle) before the resume.
// unknownSessionId: first ask to resume that session, expect a JSON-RPC error back, and carry on
// (a transport that took the refusal for a lost connection fails every later step).
export function runV2Flow(raw, { driverInfo, prompt, beforeResult = () => {}, newSessionMeta, untilAfterIdle, resumeSessionId, unknownSessionId }) {
  const stream = validatingStream(raw, (dir, err) => fail(`${dir} message invalid: ${err}`));

  // One projection for the whole connection, installed before session/new (§7.2).
  let sessionId;
  const early = []; // updates that arrive before the session/new response
  let phase = "setup"; // setup -> live -> afterIdle -> replay -> closing -> closed
  let awaitingStart = false;
  let started = false;
  const liveUpdates = [];
  const replayUpdates = [];
  const afterIdleUpdates = [];
  let stopReason;
  let resolveIdle;
  const idle = new Promise((r) => (resolveIdle = r));
  let resolveAfterIdle;
  const afterIdle = new Promise((r) => (resolveAfterIdle = r));

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
    } else if (phase === "afterIdle") {
      afterIdleUpdates.push(u);
      if (untilAfterIdle?.(u)) resolveAfterIdle();
    } else if (phase === "replay") {
      replayUpdates.push(u);
    } else if (phase === "closed") {
      fail(`update after session/close response: ${u.sessionUpdate}`);
    }
  };

  const app = acp
    .client({ name: driverInfo.name })
    .onNotification(acp.methods.client.session.update, ({ params }) => onUpdate(params))
    .onRequest(acp.methods.client.session.requestPermission, () => ({
      outcome: { outcome: "cancelled" },
    }));

  return app.connectWith(stream, async (agent) => {
    const initialize = await agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      info: driverInfo,
      capabilities: {},
    });
    const sessionCaps = initialize.capabilities?.session;
    if (sessionCaps == null || typeof sessionCaps !== "object") {
      throw new Error("agent did not advertise capabilities.session");
    }

    const cwd = process.cwd();
    let unknownSession;
    if (unknownSessionId) {
      try {
        await agent.request(acp.methods.agent.session.resume, { sessionId: unknownSessionId, cwd, mcpServers: [] });
        throw new Error(`session/resume of the unknown session ${unknownSessionId} succeeded`);
      } catch (e) {
        if (e?.code === undefined) throw e;
        unknownSession = { code: e.code, data: e.data ?? null };
      }
      await agent.request(acp.methods.agent.session.list, {}); // the connection lives on
    }
    let session;
    if (resumeSessionId) {
      // An existing session (made elsewhere, e.g. on another server): attach to it.
      sessionId = resumeSessionId;
      await agent.request(acp.methods.agent.session.resume, { sessionId, cwd, mcpServers: [] });
    } else {
      session = await agent.buildSession(newSessionMeta ? { cwd, _meta: newSessionMeta } : cwd).start();
      sessionId = session.sessionId;
    }
    for (const n of early.splice(0)) onUpdate(n);

    phase = "live";
    awaitingStart = true;
    const content = [{ type: "text", text: prompt }];
    const promptResponse = session
      ? await session.prompt(content)
      : await agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: content });
    await idle;
    if (untilAfterIdle) await afterIdle;

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
    session?.dispose();
    // Give a misbehaving agent a moment to send something after close.
    await new Promise((r) => setTimeout(r, 50));
    beforeResult();

    return {
      ok: true,
      initialize,
      sessionId,
      promptResponse,
      liveUpdates,
      stopReason: stopReason ?? null,
      replayUpdates,
      afterIdleUpdates,
      resumeResponse,
      unknownSession: unknownSession ?? null,
      agentText: projectAgentText(liveUpdates),
    };
  });
}

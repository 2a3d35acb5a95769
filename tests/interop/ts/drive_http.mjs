#!/usr/bin/env node
// ACP v2 client driver over the network, on @agentclientprotocol/sdk 2.4.0
// (/experimental/v2 + /experimental/http-client or /experimental/ws-client).
//
//   node drive_http.mjs --url URL [--transport http|ws] [--prompt TEXT]
//                       [--token TOKEN] [--timeout-ms MS] [--trace]
//
// Connects to an ACP agent served at URL (e.g. http://127.0.0.1:8765/acp) and
// runs initialize -> session/new -> session/prompt -> wait for running..idle ->
// session/resume (replay from start) -> session/close, then tears the
// connection down (HTTP: DELETE; WebSocket: close handshake). Prints ONE JSON
// object on stdout, shaped like drive_agent.mjs's: {"ok": true, ...} or
// {"ok": false, "error": ...} (exit 1).
//
// Every message in both directions is validated against the SDK's zod schemas
// (acp_validation.mjs), and anything the SDK would only log fails the run.
// Wire checks on top of what the SDK client itself enforces (it accepts any
// 2xx and ignores Content-Type):
//   http: initialize POST -> 200 + application/json (+ Acp-Connection-Id, SDK);
//         every other POST -> 202; GET -> 200 text/event-stream; the closing
//         DELETE must be sent and answered 2xx.
//   ws:   every frame from the server is a text frame holding one JSON object;
//         the close handshake completes.
// --token sends `Authorization: Bearer TOKEN` on every request / the upgrade.
// Node 20 has no global WebSocket without --experimental-websocket, so with
// --transport ws the script re-runs itself under that flag when needed.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { validatingStream } from "./acp_validation.mjs";

const DRIVER_INFO = { name: "crow-interop-ts-http-driver", version: "0.1.0" };
const TEARDOWN_MS = 3000;

let finished = false;
let closingOnPurpose = false; // set once the flow is done and teardown starts
let timer;
let opts;
const log = (...a) => process.stderr.write(`drive_http: ${a.join(" ")}\n`);
const trace = (...a) => {
  if (opts?.trace) log(...a);
};

function finish(result, code) {
  if (finished) return;
  finished = true;
  clearTimeout(timer);
  process.stdout.write(JSON.stringify(result) + "\n", () => process.exit(code));
}
function fail(error) {
  let msg =
    error?.name === "ZodError" && Array.isArray(error.issues)
      ? `schema validation failed: ${error.issues.map((i) => `${i.path.join(".") || "<root>"}: ${i.message}`).join("; ")}`
      : error instanceof Error
        ? error.message
        : typeof error?.type === "string" // WebSocket error event
          ? `WebSocket ${error.type}: ${error.message || "connection failed"}`
          : String(error);
  // fetch() hides the reason (ECONNREFUSED, ...) in `cause`.
  const cause = error?.cause;
  if (cause) msg += ` (${cause.code ?? cause.message ?? String(cause)})`;
  const data = error && typeof error === "object" && "code" in error ? { code: error.code, data: error.data } : {};
  finish({ ok: false, error: msg, ...data }, 1);
}

function parseArgs(argv) {
  const o = { url: undefined, transport: "http", prompt: "hello", token: undefined, timeoutMs: 20000, trace: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--url") o.url = value();
    else if (a === "--transport") o.transport = value();
    else if (a === "--prompt") o.prompt = value();
    else if (a === "--token") o.token = value();
    else if (a === "--timeout-ms") o.timeoutMs = Number(value());
    else if (a === "--trace") o.trace = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!o.url) throw new Error("--url is required");
  if (o.transport !== "http" && o.transport !== "ws") throw new Error("--transport must be http or ws");
  if (!(o.timeoutMs > 0)) throw new Error("--timeout-ms needs a positive number");
  let u;
  try {
    u = new URL(o.url);
  } catch {
    throw new Error(`--url is not a valid URL: ${o.url}`);
  }
  // Accept either scheme family for either transport.
  const schemes =
    o.transport === "http" ? { "ws:": "http:", "wss:": "https:" } : { "http:": "ws:", "https:": "wss:" };
  if (schemes[u.protocol]) u.protocol = schemes[u.protocol];
  const ok = o.transport === "http" ? ["http:", "https:"] : ["ws:", "wss:"];
  if (!ok.includes(u.protocol)) throw new Error(`unsupported URL scheme ${u.protocol}`);
  o.url = u.href;
  return o;
}

try {
  opts = parseArgs(process.argv.slice(2));
} catch (e) {
  fail(e);
}

/** Node 20: re-run under --experimental-websocket when WebSocket is missing. */
function reexecForWebSocket() {
  const child = spawn(
    process.execPath,
    ["--experimental-websocket", ...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)],
    { stdio: "inherit" },
  );
  child.on("error", (e) => fail(`cannot re-run under --experimental-websocket: ${e.message}`));
  child.on("exit", (code, signal) => process.exit(code ?? (signal ? 1 : 0)));
}

// The SDK reports some protocol violations only via console.error/warn
// ("Invalid message", "Skipping SSE payload that is not a JSON object",
// "Failed to parse SSE JSON payload", "Got response to unknown request").
// Turn every such report into a failure, and keep stdout clean.
function hookConsole() {
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
}

const mediaType = (res) => (res.headers.get("content-type") ?? "").split(";", 1)[0].trim().toLowerCase();

/**
 * fetch wrapper for the SDK's HTTP transport: traces each exchange, applies
 * the wire checks listed at the top, and reports the closing DELETE.
 */
function checkingFetch(onDelete) {
  return async (input, init = {}) => {
    const method = (init.method ?? "GET").toUpperCase();
    const headers = new Headers(init.headers);
    let what = method;
    let isInitialize = false;
    if (method === "POST" && typeof init.body === "string") {
      try {
        const m = JSON.parse(init.body);
        isInitialize = m.method === acp.methods.agent.initialize;
        what = `POST ${m.method ?? `response ${JSON.stringify(m.id)}`}`;
      } catch {}
    }
    const label = `${what} [conn=${headers.get("acp-connection-id") ?? "-"} sess=${headers.get("acp-session-id") ?? "-"}]`;
    let res;
    try {
      res = await globalThis.fetch(input, init);
    } catch (e) {
      if (method === "DELETE") onDelete({ error: e?.message ?? String(e) });
      throw e;
    }
    trace(`${label} -> ${res.status} ${mediaType(res) || "-"}`);
    if (method === "DELETE") {
      onDelete({ status: res.status });
    } else if (res.ok && method === "POST" && isInitialize) {
      if (res.status !== 200) fail(`wire: initialize POST answered ${res.status}, expected 200`);
      else if (mediaType(res) !== "application/json")
        fail(`wire: initialize POST answered Content-Type '${mediaType(res)}', expected application/json`);
    } else if (res.ok && method === "POST" && res.status !== 202) {
      fail(`wire: ${label} answered ${res.status}, expected 202 Accepted`);
    } else if (res.ok && method === "GET" && mediaType(res) !== "text/event-stream") {
      fail(`wire: ${label} answered Content-Type '${mediaType(res)}', expected text/event-stream`);
    }
    return res;
  };
}

/**
 * WebSocket constructor for the SDK's WS transport. The SDK calls
 * `new WebSocket(url, protocols, { headers })`; Node's (undici) WebSocket takes
 * headers only in its second-argument init dictionary, so map them there.
 * Also checks every server frame (the SDK silently drops binary frames and
 * answers non-JSON text with a -32700 error instead of reporting it).
 */
function checkingWebSocket(onSocket) {
  return class extends globalThis.WebSocket {
    constructor(url, protocols, options) {
      super(url, { protocols: protocols ?? [], headers: options?.headers });
      onSocket(this);
      this.addEventListener("open", () => trace(`websocket open ${url} protocol='${this.protocol}'`));
      this.addEventListener("message", (event) => {
        if (typeof event.data !== "string") return fail("wire: server sent a binary WebSocket frame");
        let v;
        try {
          v = JSON.parse(event.data);
        } catch {
          return fail(`wire: server sent a non-JSON WebSocket frame: ${event.data.slice(0, 200)}`);
        }
        if (typeof v !== "object" || v === null || Array.isArray(v)) {
          fail(`wire: server WebSocket frame is not a JSON object: ${event.data.slice(0, 200)}`);
        }
      });
      this.addEventListener("close", (e) => {
        trace(`websocket closed code=${e.code} reason='${e.reason}'`);
        // The SDK turns any close into a bare "ACP connection closed".
        if (!closingOnPurpose) fail(`WebSocket closed by the server mid-run (code ${e.code}${e.reason ? `: ${e.reason}` : ""})`);
      });
    }
  };
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

function withTimeout(promise, ms, what) {
  let t;
  return Promise.race([
    promise,
    new Promise((_, reject) => {
      t = setTimeout(() => reject(new Error(`${what} did not happen within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(t));
}

async function main() {
  timer = setTimeout(() => fail(`timeout after ${opts.timeoutMs} ms`), opts.timeoutMs);
  const headers = opts.token !== undefined ? { Authorization: `Bearer ${opts.token}` } : {};

  // Teardown observation: the SDK closes its transport when the connection
  // closes (readable cancelled), but swallows errors from it.
  let teardown;
  let raw;
  if (opts.transport === "http") {
    let onDelete;
    const deleted = new Promise((r) => (onDelete = r));
    raw = createHttpStream(opts.url, { headers, fetch: checkingFetch(onDelete) });
    teardown = async () => {
      const d = await withTimeout(deleted, TEARDOWN_MS, "closing DELETE");
      if (d.error) throw new Error(`closing DELETE failed: ${d.error}`);
      if (d.status < 200 || d.status > 299) throw new Error(`closing DELETE answered ${d.status}`);
    };
  } else {
    let socket;
    const WebSocketCtor = checkingWebSocket((s) => (socket = s));
    raw = createWebSocketStream(opts.url, { headers, WebSocket: WebSocketCtor });
    teardown = async () => {
      if (!socket || socket.readyState === 3) return;
      await withTimeout(
        new Promise((r) => socket.addEventListener("close", r, { once: true })),
        TEARDOWN_MS,
        "WebSocket close handshake",
      );
    };
  }
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

  const result = await app.connectWith(stream, async (agent) => {
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
    closingOnPurpose = true;

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
  // connectWith has closed the connection, which makes the SDK transport tear
  // itself down; wait for that to finish on the wire.
  await teardown();
  return result;
}

if (!finished) {
  if (opts.transport === "ws" && typeof globalThis.WebSocket !== "function") {
    reexecForWebSocket();
  } else {
    hookConsole();
    main().then(
      (result) => finish(result, 0),
      (e) => fail(e),
    );
  }
}

#!/usr/bin/env node
// ACP v2 client driver over the network, on @agentclientprotocol/sdk 2.4.0
// (/experimental/v2 + /experimental/http-client or /experimental/ws-client).
//
//   node drive_http.mjs --url URL [--transport http|ws] [--prompt TEXT]
//                       [--token TOKEN] [--timeout-ms MS] [--trace] [--session ID]
//                       [--unknown-session ID]
//
// Connects to an ACP agent served at URL (e.g. http://127.0.0.1:8765/acp) and
// runs initialize -> session/new -> session/prompt -> wait for running..idle ->
// session/resume (replay from start) -> session/close, then tears the
// connection down (HTTP: DELETE; WebSocket: close handshake). With --unknown-session,
// a session/resume of that id comes first and must be refused with a JSON-RPC error
// (result.unknownSession), the connection living on. Prints ONE JSON
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
import {
  configureDriver,
  errorMessage,
  fail,
  finish,
  hookConsole,
  isFinished,
  log,
  runV2Flow,
  startTimeout,
} from "./drive_common.mjs";

const DRIVER_INFO = { name: "crow-interop-ts-http-driver", version: "0.1.0" };
const TEARDOWN_MS = 3000;

let closingOnPurpose = false; // set once the flow is done and teardown starts
let opts;
const trace = (...a) => {
  if (opts?.trace) log(...a);
};

configureDriver("drive_http", {
  describeError(error) {
    let msg = errorMessage(error, (e) =>
      typeof e?.type === "string" // WebSocket error event
        ? `WebSocket ${e.type}: ${e.message || "connection failed"}`
        : String(e),
    );
    // fetch() hides the reason (ECONNREFUSED, ...) in `cause`.
    const cause = error?.cause;
    if (cause) msg += ` (${cause.code ?? cause.message ?? String(cause)})`;
    return msg;
  },
});

function parseArgs(argv) {
  const o = { url: undefined, transport: "http", prompt: "hello", token: undefined, timeoutMs: 20000, trace: false, session: undefined, unknownSession: undefined };
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
    else if (a === "--session") o.session = value(); // attach to it instead of session/new
    else if (a === "--unknown-session") o.unknownSession = value();
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
  startTimeout(opts.timeoutMs);
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
  const result = await runV2Flow(raw, {
    driverInfo: DRIVER_INFO,
    prompt: opts.prompt,
    beforeResult: () => (closingOnPurpose = true),
    resumeSessionId: opts.session,
    unknownSessionId: opts.unknownSession,
  });
  // connectWith has closed the connection, which makes the SDK transport tear
  // itself down; wait for that to finish on the wire.
  await teardown();
  return result;
}

if (!isFinished()) {
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

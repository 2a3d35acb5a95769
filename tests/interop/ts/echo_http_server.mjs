#!/usr/bin/env node
// Reference ACP v2 peer over Streamable HTTP + SSE and WebSocket, built on the
// SDK's own server transport (@agentclientprotocol/sdk 2.4.0,
// /experimental/server AcpServer + /experimental/node adapters).
//
//   node echo_http_server.mjs --port N [--host H] [--path /acp] [--token T] [--trace]
//                             [--chunks N] [--delay-ms D] [--idle-after-new] [--plain]
//
// Prints `listening on http://H:PORT/acp` on stderr (--port 0 picks a free
// port). Each ACP connection (HTTP initialize, or WebSocket upgrade) gets its
// own `node echo_agent.mjs` child (the existing stdio echo agent, with the
// --chunks/--delay-ms/--idle-after-new/--plain flags passed through; --plain
// skips the extra validation, for benchmarks), so sessions live
// as long as their connection. --token requires `Authorization: Bearer T` on
// every request and upgrade (401 otherwise). --trace logs each HTTP exchange.
//
// The SDK's WebSocket upgrade needs a `ws`-style server (handleUpgrade + a
// "headers" event); `ws` is not installed here, so a minimal RFC 6455 server
// (text/binary frames, fragmentation, ping/pong, close; no extensions, no
// subprotocol) stands in for it below.
import http from "node:http";
import { spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { EventEmitter } from "node:events";
import { fileURLToPath } from "node:url";
import { AcpServer } from "@agentclientprotocol/sdk/experimental/server";
import {
  createNodeHttpHandler,
  createNodeWebSocketUpgradeHandler,
} from "@agentclientprotocol/sdk/experimental/node";

const ECHO_AGENT = fileURLToPath(new URL("./echo_agent.mjs", import.meta.url));
const log = (...a) => process.stderr.write(`echo_http_server: ${a.join(" ")}\n`);

function parseArgs(argv) {
  const opts = { port: undefined, host: "127.0.0.1", path: "/acp", token: undefined, trace: false, agentArgs: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    if (a === "--port") opts.port = Number(value());
    else if (a === "--host") opts.host = value();
    else if (a === "--path") opts.path = value();
    else if (a === "--token") opts.token = value();
    else if (a === "--trace") opts.trace = true;
    else if (a === "--chunks" || a === "--delay-ms") opts.agentArgs.push(a, value());
    else if (a === "--idle-after-new" || a === "--plain") opts.agentArgs.push(a);
    else throw new Error(`unknown argument ${a}`);
  }
  if (!Number.isInteger(opts.port) || opts.port < 0 || opts.port > 65535) throw new Error("--port N is required");
  if (!opts.path.startsWith("/")) throw new Error("--path must start with /");
  return opts;
}

let opts;
try {
  opts = parseArgs(process.argv.slice(2));
} catch (e) {
  log(e.message);
  process.exit(2);
}

// ---------------------------------------------------------------------------
// Agent: one echo_agent.mjs child per ACP connection, bridged as NDJSON.

const children = new Set();

/** AgentConnector (see dist/transports/connection.d.ts) backed by a child process. */
const echoAgentConnector = {
  connect(stream) {
    const child = spawn(process.execPath, [ECHO_AGENT, ...opts.agentArgs], {
      stdio: ["pipe", "pipe", "inherit"],
    });
    children.add(child);
    const closed = new Promise((resolve) => {
      child.once("close", () => {
        children.delete(child);
        resolve();
      });
      child.once("error", (e) => {
        log("cannot start echo agent:", e.message);
        children.delete(child);
        resolve();
      });
    });
    child.stdin.on("error", () => {});

    // client -> agent: JSON lines on the child's stdin; end it when the
    // connection's inbound side closes (DELETE, socket close, shutdown).
    void (async () => {
      const reader = stream.readable.getReader();
      try {
        for (;;) {
          const { value, done } = await reader.read();
          if (done) break;
          if (!child.stdin.write(JSON.stringify(value) + "\n")) {
            await new Promise((r) => child.stdin.once("drain", r));
          }
        }
      } catch {
        // Aborted by the connection.
      } finally {
        child.stdin.end();
        const killer = setTimeout(() => child.kill("SIGKILL"), 2000);
        killer.unref();
        void closed.then(() => clearTimeout(killer));
      }
    })();

    // agent -> client: parse the child's stdout lines into messages.
    void (async () => {
      const writer = stream.writable.getWriter();
      let buf = "";
      try {
        for await (const chunk of child.stdout) {
          buf += chunk.toString("utf8");
          let nl;
          while ((nl = buf.indexOf("\n")) >= 0) {
            const line = buf.slice(0, nl).trim();
            buf = buf.slice(nl + 1);
            if (!line) continue;
            let msg;
            try {
              msg = JSON.parse(line);
            } catch {
              log("echo agent wrote a non-JSON line:", line.slice(0, 200));
              continue;
            }
            await writer.write(msg);
          }
        }
        await writer.close();
      } catch {
        // The connection shut down first.
        child.kill("SIGTERM");
      } finally {
        writer.releaseLock();
      }
    })();

    return { closed };
  },
};

const acpServer = new AcpServer({ agent: echoAgentConnector });

// ---------------------------------------------------------------------------
// Minimal RFC 6455 server socket, shaped like `ws` for the SDK's adapter.

const WS_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";
const WS_MAX_MESSAGE_BYTES = 16 * 1024 * 1024;
const utf8 = new TextDecoder("utf-8", { fatal: true });

class MiniWebSocket extends EventEmitter {
  readyState = 1; // OPEN
  #socket;
  #buf;
  #fragments = null;
  #fragOpcode = 0;
  #fragLength = 0;
  #closeSent = false;
  #closeCode = 1006;
  #closeReason = "";
  #emittedClose = false;

  constructor(socket, head) {
    super();
    this.#socket = socket;
    this.#buf = head?.length ? Buffer.from(head) : Buffer.alloc(0);
    socket.setNoDelay(true);
    socket.on("data", (d) => {
      this.#buf = this.#buf.length ? Buffer.concat([this.#buf, d]) : d;
      this.#parse();
    });
    socket.on("error", (e) => {
      if (this.listenerCount("error")) this.emit("error", e);
    });
    socket.on("close", () => this.#finish());
    if (this.#buf.length) setImmediate(() => this.#parse());
  }

  get bufferedAmount() {
    return this.#socket.writableLength;
  }

  send(data) {
    if (this.readyState !== 1) throw new Error("WebSocket is not open");
    this.#sendFrame(0x1, Buffer.from(String(data), "utf8"));
  }

  close(code, reason = "") {
    if (this.readyState >= 2) return;
    this.readyState = 2; // CLOSING
    let payload = Buffer.alloc(0);
    if (code !== undefined) {
      const r = Buffer.from(String(reason), "utf8").subarray(0, 123);
      payload = Buffer.alloc(2 + r.length);
      payload.writeUInt16BE(code, 0);
      r.copy(payload, 2);
    }
    this.#sendFrame(0x8, payload);
    this.#closeSent = true;
    const t = setTimeout(() => this.#socket.destroy(), 1000);
    t.unref();
  }

  #fail(code, reason) {
    log(`websocket protocol error: ${reason}`);
    this.close(code, reason);
    this.#buf = Buffer.alloc(0);
  }

  #sendFrame(opcode, payload) {
    if (this.#socket.destroyed || !this.#socket.writable) return;
    let header;
    if (payload.length < 126) {
      header = Buffer.from([0x80 | opcode, payload.length]);
    } else if (payload.length < 65536) {
      header = Buffer.alloc(4);
      header[0] = 0x80 | opcode;
      header[1] = 126;
      header.writeUInt16BE(payload.length, 2);
    } else {
      header = Buffer.alloc(10);
      header[0] = 0x80 | opcode;
      header[1] = 127;
      header.writeBigUInt64BE(BigInt(payload.length), 2);
    }
    this.#socket.write(Buffer.concat([header, payload]));
  }

  #parse() {
    while (this.readyState !== 3 && this.#buf.length >= 2) {
      const b = this.#buf;
      const fin = (b[0] & 0x80) !== 0;
      const opcode = b[0] & 0x0f;
      if (b[0] & 0x70) return this.#fail(1002, "RSV bits set (no extension was negotiated)");
      if ((b[1] & 0x80) === 0) return this.#fail(1002, "client frame not masked");
      let len = b[1] & 0x7f;
      let off = 2;
      if (len === 126) {
        if (b.length < 4) return;
        len = b.readUInt16BE(2);
        off = 4;
      } else if (len === 127) {
        if (b.length < 10) return;
        const big = b.readBigUInt64BE(2);
        if (big > BigInt(WS_MAX_MESSAGE_BYTES)) return this.#fail(1009, "message too big");
        len = Number(big);
        off = 10;
      }
      if (len > WS_MAX_MESSAGE_BYTES) return this.#fail(1009, "message too big");
      if (b.length < off + 4 + len) return;
      const mask = b.subarray(off, off + 4);
      const payload = Buffer.from(b.subarray(off + 4, off + 4 + len));
      for (let i = 0; i < payload.length; i++) payload[i] ^= mask[i & 3];
      this.#buf = b.subarray(off + 4 + len);
      this.#frame(fin, opcode, payload);
    }
  }

  #frame(fin, opcode, payload) {
    if (opcode >= 0x8) {
      if (!fin || payload.length > 125) return this.#fail(1002, "invalid control frame");
      if (opcode === 0x8) {
        this.#closeCode = payload.length >= 2 ? payload.readUInt16BE(0) : 1005;
        this.#closeReason = payload.length > 2 ? payload.subarray(2).toString("utf8") : "";
        if (!this.#closeSent) {
          this.#sendFrame(0x8, payload.subarray(0, Math.min(payload.length, 2)));
          this.#closeSent = true;
        }
        this.readyState = 2;
        this.#socket.end();
        return;
      }
      if (opcode === 0x9) return this.#sendFrame(0xa, payload);
      if (opcode === 0xa) return;
      return this.#fail(1002, `unknown control opcode ${opcode}`);
    }
    if (this.readyState !== 1) return; // data after our close frame is discarded
    if (opcode === 0x0) {
      if (!this.#fragments) return this.#fail(1002, "unexpected continuation frame");
      this.#fragments.push(payload);
      this.#fragLength += payload.length;
      if (this.#fragLength > WS_MAX_MESSAGE_BYTES) return this.#fail(1009, "message too big");
      if (fin) {
        const data = Buffer.concat(this.#fragments);
        this.#fragments = null;
        this.#deliver(this.#fragOpcode, data);
      }
      return;
    }
    if (opcode === 0x1 || opcode === 0x2) {
      if (this.#fragments) return this.#fail(1002, "expected a continuation frame");
      if (fin) return this.#deliver(opcode, payload);
      this.#fragments = [payload];
      this.#fragOpcode = opcode;
      this.#fragLength = payload.length;
      return;
    }
    this.#fail(1002, `unknown opcode ${opcode}`);
  }

  #deliver(opcode, data) {
    if (opcode === 0x2) {
      this.emit("message", data, true); // ws-style (data, isBinary)
      return;
    }
    let text;
    try {
      text = utf8.decode(data);
    } catch {
      return this.#fail(1007, "text frame is not valid UTF-8");
    }
    this.emit("message", text, false);
  }

  #finish() {
    this.readyState = 3; // CLOSED
    if (this.#emittedClose) return;
    this.#emittedClose = true;
    this.emit("close", this.#closeCode, this.#closeReason);
  }
}

class MiniWebSocketServer extends EventEmitter {
  handleUpgrade(req, socket, head, callback) {
    const key = req.headers["sec-websocket-key"];
    if (
      req.method !== "GET" ||
      req.headers.upgrade?.toLowerCase() !== "websocket" ||
      typeof key !== "string" ||
      Buffer.from(key, "base64").length !== 16 ||
      req.headers["sec-websocket-version"] !== "13"
    ) {
      rejectUpgrade(socket, 400, "Bad Request", "Invalid WebSocket handshake");
      return;
    }
    const accept = createHash("sha1").update(key + WS_GUID).digest("base64");
    const headers = [
      "HTTP/1.1 101 Switching Protocols",
      "Upgrade: websocket",
      "Connection: Upgrade",
      `Sec-WebSocket-Accept: ${accept}`,
    ];
    this.emit("headers", headers, req); // the SDK adds Acp-Connection-Id here
    socket.write(headers.concat("\r\n").join("\r\n"));
    callback(new MiniWebSocket(socket, head));
  }
}

function rejectUpgrade(socket, status, statusText, body, extra = []) {
  socket.end(
    [
      `HTTP/1.1 ${status} ${statusText}`,
      "Connection: close",
      "Content-Type: text/plain",
      `Content-Length: ${Buffer.byteLength(body)}`,
      ...extra,
      "",
      body,
    ].join("\r\n"),
  );
}

// ---------------------------------------------------------------------------
// HTTP server.

const authorized = (req) => opts.token === undefined || req.headers.authorization === `Bearer ${opts.token}`;
const pathOf = (req) => (req.url ?? "/").split("?", 1)[0];
const trace = (req, status) => {
  if (!opts.trace) return;
  const h = req.headers;
  log(
    `${req.method} ${req.url} conn=${h["acp-connection-id"] ?? "-"} sess=${h["acp-session-id"] ?? "-"}` +
      ` accept=${h.accept ?? "-"} ct=${h["content-type"] ?? "-"} -> ${status}`,
  );
};

const httpHandler = createNodeHttpHandler(acpServer);
const wsServer = new MiniWebSocketServer();
const upgradeHandler = createNodeWebSocketUpgradeHandler(acpServer, wsServer);

const server = http.createServer((req, res) => {
  if (pathOf(req) !== opts.path) {
    trace(req, 404);
    res.writeHead(404, { "Content-Type": "text/plain" }).end("Not Found");
    return;
  }
  if (!authorized(req)) {
    trace(req, 401);
    res.writeHead(401, { "Content-Type": "text/plain", "WWW-Authenticate": "Bearer" }).end("Unauthorized");
    return;
  }
  if (opts.trace) {
    // The SDK adapter sets statusCode and then flushes the headers.
    const flush = res.flushHeaders.bind(res);
    res.flushHeaders = () => {
      trace(req, res.statusCode);
      flush();
    };
  }
  httpHandler(req, res);
});

server.on("upgrade", (req, socket, head) => {
  socket.on("error", () => {});
  if (pathOf(req) !== opts.path) {
    trace(req, 404);
    rejectUpgrade(socket, 404, "Not Found", "Not Found");
    return;
  }
  if (!authorized(req)) {
    trace(req, 401);
    rejectUpgrade(socket, 401, "Unauthorized", "Unauthorized", ["WWW-Authenticate: Bearer"]);
    return;
  }
  trace(req, 101);
  upgradeHandler(req, socket, head);
});

server.listen(opts.port, opts.host, () => {
  const { port } = server.address();
  const host = opts.host.includes(":") ? `[${opts.host}]` : opts.host;
  process.stderr.write(`listening on http://${host}:${port}${opts.path}\n`);
});

let stopping = false;
async function stop() {
  if (stopping) return;
  stopping = true;
  server.close();
  server.closeAllConnections?.();
  const done = acpServer.close().catch(() => {});
  await Promise.race([done, new Promise((r) => setTimeout(r, 1000))]);
  for (const child of children) child.kill("SIGKILL");
  process.exit(0);
}
process.on("SIGINT", stop);
process.on("SIGTERM", stop);

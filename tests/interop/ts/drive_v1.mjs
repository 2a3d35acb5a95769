#!/usr/bin/env node
// ACP v1 client driver on @agentclientprotocol/sdk 2.4.0's default entrypoint (stable v1).
//
//   node drive_v1.mjs --command "CMD ARGS" [--prompt TEXT] [--permission allow|reject|cancel]
//                     [--timeout-ms MS]
//
// Spawns the agent, runs initialize(protocolVersion 1) -> session/new -> session/prompt
// (answering permission requests as told) -> session/load (the history replayed as v1
// updates) -> session/close, and prints ONE JSON object on stdout: {"ok": true, ...} or
// {"ok": false, "error": ...} (exit 1). Every message in both directions is validated
// against the SDK's own v1 zod schemas; any failure, including one the SDK would only
// log, fails the run.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";
import { configureDriver, fail, finish, hookConsole, spawnAgent, startTimeout } from "./drive_common.mjs";

const entry = import.meta.resolve("@agentclientprotocol/sdk");
const z = await import(new URL("../schema/zod.gen.js", entry).href);

const DRIVER_INFO = { name: "crow-interop-ts-v1-driver", version: "0.1.0" };

configureDriver("drive_v1");
hookConsole();

// ---- v1 schema validation of every message, both directions -----------------------
const M = acp.methods;
/** method -> [params schema, result schema] */
const REQUESTS = {
  [M.agent.initialize]: [z.zInitializeRequest, z.zInitializeResponse],
  [M.agent.session.new]: [z.zNewSessionRequest, z.zNewSessionResponse],
  [M.agent.session.load]: [z.zLoadSessionRequest, z.zLoadSessionResponse],
  [M.agent.session.list]: [z.zListSessionsRequest, z.zListSessionsResponse],
  [M.agent.session.resume]: [z.zResumeSessionRequest, z.zResumeSessionResponse],
  [M.agent.session.close]: [z.zCloseSessionRequest, z.zCloseSessionResponse],
  [M.agent.session.setConfigOption]: [z.zSetSessionConfigOptionRequest, z.zSetSessionConfigOptionResponse],
  [M.agent.session.prompt]: [z.zPromptRequest, z.zPromptResponse],
  [M.client.session.requestPermission]: [z.zRequestPermissionRequest, z.zRequestPermissionResponse],
};
const NOTIFICATIONS = {
  [M.agent.session.cancel]: z.zCancelNotification,
  [M.client.session.update]: z.zSessionNotification,
  "$/cancel_request": z.zCancelRequestNotification,
};

function check(schema, value, what) {
  const r = schema.safeParse(value);
  if (r.success) return undefined;
  const issues = r.error.issues
    .slice(0, 5)
    .map((i) => `${i.path.join(".") || "<root>"}: ${i.message}`)
    .join("; ");
  return `${what} failed schema validation: ${issues}`;
}

function validateMessage(msg, { sentRequests, seenRequests }, dir) {
  if (typeof msg !== "object" || msg === null || Array.isArray(msg)) return `${dir}: not a JSON-RPC object`;
  if (msg.jsonrpc !== "2.0") return `${dir}: missing jsonrpc "2.0"`;
  const hasId = Object.hasOwn(msg, "id");
  if (typeof msg.method === "string") {
    const label = `${dir} ${hasId ? "request" : "notification"} '${msg.method}'`;
    if (hasId) {
      sentRequests.set(msg.id, msg.method);
      const spec = REQUESTS[msg.method];
      if (spec) return check(spec[0], msg.params ?? {}, `${label} params`);
      return msg.method.startsWith("_") ? undefined : `${label}: unexpected v1 request method`;
    }
    const schema = NOTIFICATIONS[msg.method];
    if (schema) return check(schema, msg.params ?? {}, `${label} params`);
    return msg.method.startsWith("_") ? undefined : `${label}: unexpected v1 notification`;
  }
  if (!hasId) return `${dir}: message has neither method nor id`;
  const hasResult = Object.hasOwn(msg, "result");
  if (hasResult === Object.hasOwn(msg, "error")) return `${dir} response: needs exactly one of result/error`;
  const method = seenRequests.get(msg.id);
  seenRequests.delete(msg.id);
  const label = `${dir} response to '${method ?? "?"}' (id ${JSON.stringify(msg.id)})`;
  if (!hasResult) return check(z.zError, msg.error, `${label} error`);
  if (method === undefined) return `${label}: response to an unknown request id`;
  const spec = REQUESTS[method];
  return spec ? check(spec[1], msg.result, `${label} result`) : undefined;
}

function validatingStream(stream, onInvalid) {
  const outgoing = new Map();
  const incoming = new Map();
  const readable = stream.readable.pipeThrough(
    new TransformStream({
      transform(msg, controller) {
        const err = validateMessage(msg, { sentRequests: incoming, seenRequests: outgoing }, "incoming");
        if (err) onInvalid("incoming", err);
        controller.enqueue(msg);
      },
    }),
  );
  const tap = new TransformStream({
    transform(msg, controller) {
      const err = validateMessage(msg, { sentRequests: outgoing, seenRequests: incoming }, "outgoing");
      if (err) onInvalid("outgoing", err);
      controller.enqueue(msg);
    },
  });
  void tap.readable.pipeTo(stream.writable).catch(() => {});
  return { readable, writable: tap.writable };
}

function parseArgs(argv) {
  const opts = { command: undefined, prompt: "hello", permission: "allow", timeoutMs: 30000 };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--command") opts.command = argv[++i];
    else if (a === "--prompt") opts.prompt = argv[++i];
    else if (a === "--permission") opts.permission = argv[++i];
    else if (a === "--timeout-ms") opts.timeoutMs = Number(argv[++i]);
    else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.command || !opts.command.trim()) throw new Error("--command is required");
  if (!["allow", "reject", "cancel"].includes(opts.permission)) throw new Error("--permission: allow|reject|cancel");
  return opts;
}

function agentText(updates) {
  return updates
    .filter((u) => u.sessionUpdate === "agent_message_chunk" && u.content.type === "text")
    .map((u) => u.content.text)
    .join("");
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  startTimeout(opts.timeoutMs);

  const child = spawnAgent(opts.command);
  const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const stream = validatingStream(raw, (dir, err) => fail(`${dir} message invalid: ${err}`));

  let sessionId;
  let phase = "setup"; // setup -> live -> load -> closed
  const liveUpdates = [];
  const loadUpdates = [];
  const permissionRequests = [];

  const onUpdate = ({ sessionId: sid, update }) => {
    if (sessionId !== undefined && sid !== sessionId) return fail(`update for unknown session ${sid}`);
    if (phase === "load") loadUpdates.push(update);
    else if (phase === "closed") fail(`update after session/close: ${update.sessionUpdate}`);
    else liveUpdates.push(update);
  };

  const app = acp
    .client({ name: DRIVER_INFO.name })
    .onNotification(M.client.session.update, ({ params }) => onUpdate(params))
    .onRequest(M.client.session.requestPermission, ({ params }) => {
      permissionRequests.push(params);
      if (opts.permission === "cancel") return { outcome: { outcome: "cancelled" } };
      const kind = opts.permission === "allow" ? "allow_once" : "reject_once";
      const option = params.options.find((o) => o.kind === kind);
      if (!option) throw new Error(`no ${kind} option offered`);
      return { outcome: { outcome: "selected", optionId: option.optionId } };
    });

  return app.connectWith(stream, async (agent) => {
    const initialize = await agent.request(M.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: DRIVER_INFO,
    });
    if (initialize.protocolVersion !== 1) throw new Error(`agent answered v${initialize.protocolVersion}`);
    if (!initialize.agentCapabilities?.loadSession) throw new Error("agent cannot load sessions");

    const cwd = process.cwd();
    const newSession = await agent.request(M.agent.session.new, { cwd, mcpServers: [] });
    sessionId = newSession.sessionId;

    phase = "live";
    const promptResponse = await agent.request(M.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: opts.prompt }],
    });

    phase = "load";
    const loadResponse = await agent.request(M.agent.session.load, { sessionId, cwd, mcpServers: [] });
    await agent.request(M.agent.session.close, { sessionId });
    phase = "closed";
    await new Promise((r) => setTimeout(r, 50));

    return {
      ok: true,
      initialize,
      sessionId,
      newSession,
      promptResponse,
      stopReason: promptResponse.stopReason,
      liveUpdates,
      permissionRequests,
      loadResponse,
      loadUpdates,
      agentText: agentText(liveUpdates),
    };
  });
}

main().then(
  (result) => finish(result, 0),
  (e) => setTimeout(() => fail(e), 200),
);

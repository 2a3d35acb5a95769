// Schema validation tap shared by echo_agent.mjs and drive_agent.mjs.
//
// The SDK (2.4.0, /experimental/v2) validates with its generated zod schemas,
// but only part of the traffic: incoming request params, the initialize
// exchange, and incoming responses/updates on the client side. It does NOT
// validate outgoing notifications or non-initialize responses, and it only
// logs (console.error) invalid incoming notifications. This module wraps an
// SDK `Stream` and checks EVERY message in both directions against the SDK's
// own zod schemas (dist/v2/schema/zod.gen.js, the same objects the SDK uses;
// that file is not in the package "exports", so it is located through the
// resolved entrypoint).
import * as acp from "@agentclientprotocol/sdk/experimental/v2";

const entry = import.meta.resolve("@agentclientprotocol/sdk/experimental/v2");
const z = await import(new URL("../schema/zod.gen.js", entry).href);

const M = acp.methods;
/** method -> [params schema, result schema] */
const REQUESTS = {
  [M.agent.initialize]: [z.zInitializeRequest, z.zInitializeResponse],
  [M.agent.auth.login]: [z.zLoginAuthRequest, z.zLoginAuthResponse],
  [M.agent.auth.logout]: [z.zLogoutAuthRequest, z.zLogoutAuthResponse],
  [M.agent.session.new]: [z.zNewSessionRequest, z.zNewSessionResponse],
  [M.agent.session.list]: [z.zListSessionsRequest, z.zListSessionsResponse],
  [M.agent.session.delete]: [z.zDeleteSessionRequest, z.zDeleteSessionResponse],
  [M.agent.session.resume]: [z.zResumeSessionRequest, z.zResumeSessionResponse],
  [M.agent.session.close]: [z.zCloseSessionRequest, z.zCloseSessionResponse],
  [M.agent.session.setConfigOption]: [
    z.zSetSessionConfigOptionRequest,
    z.zSetSessionConfigOptionResponse,
  ],
  [M.agent.session.prompt]: [z.zPromptRequest, z.zPromptResponse],
  [M.agent.toolCall.cancel]: [z.zCancelToolCallRequest, z.zCancelToolCallResponse],
  [M.agent.terminal.cancel]: [z.zCancelTerminalRequest, z.zCancelTerminalResponse],
  [M.client.session.requestPermission]: [
    z.zRequestPermissionRequest,
    z.zRequestPermissionResponse,
  ],
  [M.client.elicitation.create]: [
    z.zCreateElicitationRequest,
    z.zCreateElicitationResponse,
  ],
};
const NOTIFICATIONS = {
  [M.agent.session.cancel]: z.zCancelSessionNotification,
  [M.client.session.update]: z.zUpdateSessionNotification,
  [M.client.elicitation.complete]: z.zCompleteElicitationNotification,
  [M.protocol.cancelRequest]: z.zCancelRequestNotification,
};

function check(schema, value, what) {
  const r = schema.safeParse(value);
  if (!r.success) {
    const issues = r.error.issues
      .slice(0, 5)
      .map((i) => `${i.path.join(".") || "<root>"}: ${i.message}`)
      .join("; ");
    return `${what} failed schema validation: ${issues}`;
  }
  return undefined;
}

/**
 * Validates one JSON-RPC message. `sentRequests` records request ids flowing in
 * this direction; `seenRequests` holds ids of requests that flowed the other
 * way, so a response can be checked against its request's result schema.
 * Returns an error string or undefined.
 */
function validateMessage(msg, { sentRequests, seenRequests }, dir) {
  if (typeof msg !== "object" || msg === null || Array.isArray(msg)) {
    return `${dir}: not a JSON-RPC object`;
  }
  if (msg.jsonrpc !== "2.0") return `${dir}: missing jsonrpc "2.0"`;
  const hasId = Object.hasOwn(msg, "id");
  if (typeof msg.method === "string") {
    const label = `${dir} ${hasId ? "request" : "notification"} '${msg.method}'`;
    if (hasId) {
      if (!(typeof msg.id === "string" || Number.isInteger(msg.id))) {
        return `${label}: id must be a string or integer`;
      }
      sentRequests.set(msg.id, msg.method);
      const spec = REQUESTS[msg.method];
      if (spec) return check(spec[0], msg.params ?? {}, `${label} params`);
      if (!msg.method.startsWith("_")) return `${label}: unknown ACP v2 request method`;
      return undefined;
    }
    const schema = NOTIFICATIONS[msg.method];
    if (schema) return check(schema, msg.params ?? {}, `${label} params`);
    if (!msg.method.startsWith("_")) return `${label}: unknown ACP v2 notification method`;
    return undefined;
  }
  // response
  if (!hasId) return `${dir}: message has neither method nor id`;
  const hasResult = Object.hasOwn(msg, "result");
  const hasError = Object.hasOwn(msg, "error");
  if (hasResult === hasError) return `${dir} response ${JSON.stringify(msg.id)}: needs exactly one of result/error`;
  const method = seenRequests.get(msg.id);
  seenRequests.delete(msg.id);
  const label = `${dir} response to '${method ?? "?"}' (id ${JSON.stringify(msg.id)})`;
  if (hasError) return check(z.zError, msg.error, `${label} error`);
  if (method === undefined) return `${label}: response to an unknown request id`;
  const spec = REQUESTS[method];
  return spec ? check(spec[1], msg.result, `${label} result`) : undefined;
}

/**
 * Wraps an SDK Stream so every message is validated in both directions.
 * `onInvalid(direction, error, message)` is called for each failure; the
 * message is still passed on so the SDK applies its own handling too.
 */
export function validatingStream(stream, onInvalid) {
  const outgoing = new Map(); // ids of requests we sent -> method
  const incoming = new Map(); // ids of requests we received -> method
  const readable = stream.readable.pipeThrough(
    new TransformStream({
      transform(msg, controller) {
        const err = validateMessage(msg, { sentRequests: incoming, seenRequests: outgoing }, "incoming");
        if (err) onInvalid("incoming", err, msg);
        controller.enqueue(msg);
      },
    }),
  );
  const tap = new TransformStream({
    transform(msg, controller) {
      const err = validateMessage(msg, { sentRequests: outgoing, seenRequests: incoming }, "outgoing");
      if (err) onInvalid("outgoing", err, msg);
      controller.enqueue(msg);
    },
  });
  void tap.readable.pipeTo(stream.writable).catch(() => {});
  return { readable, writable: tap.writable };
}

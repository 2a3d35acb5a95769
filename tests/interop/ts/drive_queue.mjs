#!/usr/bin/env node
// ACP v2 client driver on @agentclientprotocol/sdk 2.4.0: prompts sent while a turn
// runs (held, then inserted) and background work outliving a turn.
//
//   node drive_queue.mjs --command "CMD ARGS" --prompt TEXT [--prompt TEXT ...]
//                        [--until-background-empty] [--timeout-ms MS]
//
// Spawns the agent, runs initialize -> session/new, then sends every prompt at once
// (none awaits the one before), waits for every answer and as many idles as prompts,
// then (--until-background-empty) for a state update whose background list is empty
// after one that was not, then session/close.  Every message both ways is validated
// by the SDK's own schemas (acp_validation.mjs).  Prints ONE JSON object on stdout.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { validatingStream } from "./acp_validation.mjs";
import { configureDriver, fail, finish, hookConsole, spawnAgent, startTimeout } from "./drive_common.mjs";

const DRIVER_INFO = { name: "crow-interop-ts-queue", version: "0.1.0" };

configureDriver("drive_queue");
hookConsole();

function parseArgs(argv) {
  const opts = { command: undefined, prompts: [], timeoutMs: 30000, untilBackgroundEmpty: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--command") opts.command = argv[++i];
    else if (a === "--prompt") opts.prompts.push(argv[++i]);
    else if (a === "--timeout-ms") opts.timeoutMs = Number(argv[++i]);
    else if (a === "--until-background-empty") opts.untilBackgroundEmpty = true;
    else throw new Error(`unknown argument ${a}`);
  }
  if (!opts.command) throw new Error("--command is required");
  if (opts.prompts.length === 0) throw new Error("at least one --prompt is required");
  return opts;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  startTimeout(opts.timeoutMs);
  const child = spawnAgent(opts.command);
  const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
  const stream = validatingStream(raw, (dir, err) => fail(`${dir} message invalid: ${err}`));

  const updates = [];
  let idles = 0;
  let backgroundSeen = false;
  const waiters = [];
  const settle = () => {
    for (const w of waiters.splice(0)) if (!w.test()) waiters.push(w); else w.resolve();
  };
  const until = (test) => new Promise((resolve) => {
    waiters.push({ test, resolve });
    settle();
  });
  const app = acp
    .client({ name: DRIVER_INFO.name })
    .onNotification(acp.methods.client.session.update, ({ params }) => {
      const u = params.update;
      updates.push(u);
      if (acp.SessionUpdate.isStateUpdate(u)) {
        if (acp.StateUpdate.isIdle(u) && updates.some((v) => v.sessionUpdate === "user_message")) idles += 1;
        if ((u.background ?? []).length > 0) backgroundSeen = true;
      }
      settle();
    })
    .onRequest(acp.methods.client.session.requestPermission, () => ({ outcome: { outcome: "cancelled" } }));

  return app.connectWith(stream, async (agent) => {
    const initialize = await agent.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      info: DRIVER_INFO,
      capabilities: {},
    });
    const { sessionId } = await agent.request(acp.methods.agent.session.new, { cwd: process.cwd(), mcpServers: [] });
    const answers = await Promise.all(
      opts.prompts.map((text) =>
        agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] }),
      ),
    );
    await until(() => idles >= opts.prompts.length);
    if (opts.untilBackgroundEmpty) {
      await until(() => {
        const last = updates.filter((u) => acp.SessionUpdate.isStateUpdate(u)).at(-1);
        return backgroundSeen && Array.isArray(last?.background) && last.background.length === 0;
      });
    }
    await agent.request(acp.methods.agent.session.close, { sessionId });
    return { ok: true, initialize, sessionId, answers, updates };
  });
}

main().then(
  (result) => finish(result, 0),
  (e) => setTimeout(() => fail(e), 200),
);

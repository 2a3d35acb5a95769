#!/usr/bin/env node
// ACP v2 client driver on @agentclientprotocol/sdk 2.4.0 (/experimental/v2).
//
//   node drive_agent.mjs --command "CMD ARGS" [--prompt TEXT] [--timeout-ms MS] [--verify]
//
// --verify asks a Crow agent's judge to verify the session (_meta["crow/verify"])
// and waits past the idle for the verdict (an agent_message with _meta["crow/verdict"]).
//
// Spawns the agent, runs initialize -> session/new -> session/prompt -> wait for
// running..idle -> session/resume (replay from start) -> session/close, and prints
// ONE JSON object on stdout: {"ok": true, ...} or {"ok": false, "error": ...}
// (exit 1). Every message in both directions is schema-validated; any failure,
// including one the SDK would only log, fails the run.
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { configureDriver, fail, finish, hookConsole, runV2Flow, spawnAgent, startTimeout } from "./drive_common.mjs";

const DRIVER_INFO = { name: "crow-interop-ts-driver", version: "0.1.0" };

configureDriver("drive_agent");
hookConsole();

function parseArgs(argv) {
  const opts = { command: undefined, prompt: "hello", timeoutMs: 20000, verify: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--command") opts.command = argv[++i];
    else if (a === "--prompt") opts.prompt = argv[++i];
    else if (a === "--timeout-ms") opts.timeoutMs = Number(argv[++i]);
    else if (a === "--verify") opts.verify = true;
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

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  startTimeout(opts.timeoutMs);

  const child = spawnAgent(opts.command);
  const [forSdk, forCheck] = Readable.toWeb(child.stdout).tee();
  void checkStdoutLines(forCheck).catch((e) => fail(e));
  const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), forSdk);
  const verify = opts.verify
    ? {
        newSessionMeta: { "crow/verify": true },
        untilAfterIdle: (u) => acp.SessionUpdate.isAgentMessage(u) && u._meta?.["crow/verdict"] !== undefined,
      }
    : {};
  return runV2Flow(raw, { driverInfo: DRIVER_INFO, prompt: opts.prompt, ...verify });
}

main().then(
  (result) => finish(result, 0),
  // Briefly defer so an agent crash is reported by the child's exit handler
  // ("agent exited early ...") rather than as a bare "ACP connection closed".
  (e) => setTimeout(() => fail(e), 200),
);

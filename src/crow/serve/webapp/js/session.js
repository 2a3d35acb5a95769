// One session's history as the page shows it: session/update notifications folded
// into ordered entries (messages, tool calls, terminals, plans, notices, turn ends),
// by the ACP v2 patch rules (ACP-V2.md §8.1).  Each entry has a `v` bumped at every
// change, so the list view redraws only the entries that changed.
//
// Every update Crow logs carries _meta["crow/seq"]: an update at or below the last
// seq seen is one a reconnect's replay gave again, and is dropped (no duplicates).
// So updates must be applied in the log's order: while the page opens a session,
// what the WebSocket brings for it is held (hold, take, release), and applied
// after the history (see release).

export const SEQ = "crow/seq";
export const VERDICT = "crow/verdict";
export const NOTICE = "crow/notice";
export const RECALLED = "crow/recalled";
export const JUDGING = "crow/judging";
export const FROM = "crow/from";
export const CLIENT = "crow/client";
export const DIFF = "crow/diff";
export const QUEUE = "_crow/queue";
export const TURN_ENDED = "_crow/turnEnded";
export const WAIT_OVER = "crow/waitOver";

const MESSAGE_ROLES = {
  user_message: "user",
  user_message_chunk: "user",
  agent_message: "agent",
  agent_message_chunk: "agent",
  agent_thought: "thought",
  agent_thought_chunk: "thought",
};

// ACP [T] per-key _meta merge: an object patches key by key, null drops a key.
function mergeMeta(stored, patch) {
  if (patch === undefined) return stored;
  if (patch === null) return null;
  const out = { ...(stored || {}) };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete out[key];
    else out[key] = value;
  }
  return out;
}

export function textOf(blocks) {
  return (blocks || [])
    .map((b) => (b && b.type === "text" && typeof b.text === "string" ? b.text : ""))
    .join("");
}

export class SessionState {
  constructor(id) {
    this.id = id;
    this.entries = []; // in order of first sight
    this.byKey = new Map();
    this.lastSeq = 0;
    this.state = "idle";
    this.stopReason = null;
    this.background = [];
    this.usage = null;
    this.title = null;
    this.updatedAt = null;
    this.configOptions = [];
    this.commands = [];
    this.queue = [];
    this.mine = new Set(); // message ids of the prompts this page sent
    this.replaying = false;
    this.held = null; // the WebSocket's updates while the session opens
    this.listeners = new Set();
    this.status = null; // what a busy turn waits for (a notice's title)
    this.terminalRefs = new Map(); // terminalId -> tool entry keys that show it
  }

  changed(what) {
    for (const listener of this.listeners) listener(what);
  }

  entry(key, make) {
    let found = this.byKey.get(key);
    if (!found) {
      found = { key, v: 0, index: this.entries.length, ...make() };
      this.byKey.set(key, found);
      this.entries.push(found);
      this.changed({ added: found });
    }
    return found;
  }

  bump(entry) {
    entry.v += 1;
    this.changed({ entry });
  }

  // From now until release(), take() holds what it is given.
  hold() {
    this.held = [];
  }

  // A session/update that came over the WebSocket: applied, or held while opening.
  take(params) {
    if (this.held) this.held.push(params);
    else this.apply(params);
  }

  // Applies what was held, in the log's order.  A page that still watches the session
  // (it was opened before) gets its new updates over the WebSocket while its history
  // comes over HTTP: applied first, they would make the history look seen and dropped.
  // And the WebSocket's own resume replays, after those live updates, the stretch they
  // belong to: sorted by seq, each comes once, in place.
  release() {
    const held = this.held || [];
    this.held = null;
    for (const params of inLogOrder(held)) this.apply(params);
  }

  // One session/update's params.  Returns false for a duplicate.
  apply(params) {
    const seq = seqOf(params);
    if (typeof seq === "number") {
      if (seq <= this.lastSeq) return false;
      this.lastSeq = seq;
    }
    const update = params.update || {};
    const kind = update.sessionUpdate;
    if (kind in MESSAGE_ROLES) this.message(update, MESSAGE_ROLES[kind], kind.endsWith("_chunk"));
    else if (kind === "tool_call_update") this.toolCall(update);
    else if (kind === "tool_call_content_chunk") this.toolContent(update);
    else if (kind === "terminal_update" || kind === "terminal_output_chunk") this.terminal(update);
    else if (kind === "plan_update") this.plan(update);
    else if (kind === "state_update") this.stateUpdate(update);
    else if (kind === "usage_update") {
      this.usage = update;
      this.changed({ header: true });
    } else if (kind === "session_info_update") {
      if ("title" in update) this.title = update.title;
      if ("updatedAt" in update) this.updatedAt = update.updatedAt;
      this.changed({ header: true });
    } else if (kind === "config_option_update") {
      this.configOptions = update.configOptions || [];
      this.changed({ config: true });
    } else if (kind === "available_commands_update") {
      this.commands = update.availableCommands || [];
      this.changed({ commands: true });
    } else if (kind === "notice") {
      this.notice(update);
    } else if (kind === QUEUE) {
      this.queue = Array.isArray(update.prompts) ? update.prompts : [];
      for (const held of this.queue) if (held.yours && held.messageId) this.mine.add(held.messageId);
      this.changed({ queue: true });
    } else if (kind === TURN_ENDED) {
      this.turnEnd(update.stopReason, update.error);
    }
    return true;
  }

  message(update, role, chunk) {
    const id = update.messageId;
    if (typeof id !== "string") return;
    if (role === "user" && this.replaying) this.inferTurnEnd();
    const entry = this.entry("m:" + id, () => ({ type: "message", role, id, content: [], meta: null }));
    if (chunk) {
      if (update.content) entry.content.push(update.content);
    } else {
      if (update.content !== undefined) entry.content = update.content ? [...update.content] : [];
      entry.meta = mergeMeta(entry.meta, update._meta);
    }
    if (role === "agent" && this.status) this.setStatus(null);
    this.bump(entry);
  }

  toolCall(update) {
    const id = update.toolCallId;
    if (typeof id !== "string") return;
    const entry = this.entry("t:" + id, () => ({
      type: "tool",
      id,
      title: null,
      kind: "other",
      status: "pending",
      content: [],
      locations: [],
      rawInput: undefined,
      rawOutput: undefined,
      meta: null,
    }));
    for (const field of ["title", "kind", "status", "rawInput", "rawOutput", "locations"]) {
      if (field in update) entry[field] = update[field];
    }
    if (update.kind === null) entry.kind = "other";
    if (update.status === null) entry.status = "pending";
    if ("content" in update) entry.content = update.content ? [...update.content] : [];
    entry.meta = mergeMeta(entry.meta, update._meta);
    this.linkTerminals(entry);
    this.bump(entry);
  }

  toolContent(update) {
    const entry = this.byKey.get("t:" + update.toolCallId);
    if (!entry || !update.content) return;
    entry.content.push(update.content);
    this.linkTerminals(entry);
    this.bump(entry);
  }

  // A terminal a tool call shows is drawn inside it (not as an entry of its own).
  linkTerminals(entry) {
    for (const item of entry.content) {
      if (item && item.type === "terminal" && item.terminalId) {
        const refs = this.terminalRefs.get(item.terminalId) || new Set();
        refs.add(entry.key);
        this.terminalRefs.set(item.terminalId, refs);
        this.removeEntry("x:" + item.terminalId);
      }
    }
  }

  removeEntry(key) {
    const found = this.byKey.get(key);
    if (!found) return;
    this.byKey.delete(key);
    const at = this.entries.indexOf(found);
    if (at >= 0) this.entries.splice(at, 1);
    this.changed({ removed: found });
  }

  terminal(update) {
    const id = update.terminalId;
    if (typeof id !== "string") return;
    this.terminals = this.terminals || new Map();
    let term = this.terminals.get(id);
    if (!term) {
      term = { id, command: null, cwd: null, bytes: new Uint8Array(0), exitStatus: undefined };
      this.terminals.set(id, term);
    }
    if (update.sessionUpdate === "terminal_output_chunk") {
      term.bytes = concat(term.bytes, decode64(update.data));
    } else {
      if ("command" in update) term.command = update.command;
      if ("cwd" in update) term.cwd = update.cwd;
      if (update.output) term.bytes = decode64(update.output.data);
      if ("exitStatus" in update) term.exitStatus = update.exitStatus;
    }
    const refs = this.terminalRefs.get(id);
    if (refs && refs.size) {
      for (const key of refs) this.bump(this.byKey.get(key));
      return;
    }
    const entry = this.entry("x:" + id, () => ({ type: "terminal", id }));
    this.bump(entry);
  }

  terminalOf(id) {
    return this.terminals ? this.terminals.get(id) : undefined;
  }

  plan(update) {
    const plan = update.plan;
    if (!plan || typeof plan.planId !== "string") return;
    const entry = this.entry("p:" + plan.planId, () => ({ type: "plan", plan }));
    entry.plan = plan;
    this.bump(entry);
  }

  notice(update) {
    const meta = update._meta || {};
    if (meta[WAIT_OVER]) this.setStatus(null);
    else this.setStatus(String(update.title || ""));
    if (update.severity === "info" && !update.description) return; // a wait: the status line
    const key = "n:" + this.entries.length;
    this.entry(key, () => ({ type: "notice", severity: update.severity, title: update.title, description: update.description }));
  }

  setStatus(text) {
    this.status = text;
    this.changed({ header: true });
  }

  stateUpdate(update) {
    const before = this.state;
    this.state = typeof update.state === "string" ? update.state : "running";
    if (Array.isArray(update.background)) this.background = update.background;
    if (this.state === "idle") {
      this.setStatus(null);
      if (update.stopReason) this.stopReason = update.stopReason;
      if (before !== "idle" && update.stopReason && !this.replaying) {
        this.turnEnd(update.stopReason, update.error);
      } else if (this.replaying && update.stopReason) {
        this.inferTurnEnd(update.stopReason);
      }
    }
    this.changed({ header: true, state: true });
  }

  // A turn's end: one marker, not two (an idle after _crow/turnEnded says it again).
  turnEnd(stopReason, error) {
    const last = this.entries[this.entries.length - 1];
    if (last && last.type === "end") {
      if (!last.error && error) {
        last.error = error;
        this.bump(last);
      }
      return;
    }
    this.entry("e:" + this.entries.length, () => ({ type: "end", stopReason: stopReason || "end_turn", error }));
  }

  // In a replay a turn that ended well left no mark: one is inferred where the next
  // prompt starts, after the agent said something.
  inferTurnEnd(stopReason = "end_turn") {
    for (let i = this.entries.length - 1; i >= 0; i--) {
      const entry = this.entries[i];
      if (entry.type === "end") return;
      if (entry.type === "message" && entry.role === "user") {
        if (i === this.entries.length - 1) return;
        this.turnEnd(stopReason);
        return;
      }
    }
  }

  // Who sent a prompt, for its label: you (this page), the judge, another client.
  whoSaid(entry) {
    const meta = entry.meta || {};
    if (meta[FROM] === "judge") return "judge";
    if (this.mine.has(entry.id)) return "you";
    if (typeof meta[CLIENT] === "string" && meta[CLIENT]) return meta[CLIENT];
    if (typeof meta[FROM] === "string" && meta[FROM]) return meta[FROM];
    return null;
  }
}

function seqOf(params) {
  return params._meta ? params._meta[SEQ] : undefined;
}

// Stable-sorted by seq; an unlogged update (a state snapshot, a wait's notice) keeps
// its place after the logged one it came after.
function inLogOrder(updates) {
  let at = 0;
  const keyed = updates.map((params, index) => {
    const seq = seqOf(params);
    if (typeof seq === "number") at = seq;
    return { at, index, params };
  });
  keyed.sort((a, b) => a.at - b.at || a.index - b.index);
  return keyed.map((one) => one.params);
}

function decode64(data) {
  if (typeof data !== "string") return new Uint8Array(0);
  try {
    const raw = atob(data);
    const out = new Uint8Array(raw.length);
    for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
    return out;
  } catch {
    return new Uint8Array(0);
  }
}

function concat(a, b) {
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

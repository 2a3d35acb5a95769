// One session, opened with its whole history replayed (session/resume, replayFrom
// start) and then live; after a reconnect it resumes from the last crow/seq seen
// (_crow/after), so nothing shows twice.  Driving: the prompt box, attachments,
// cancel, permission questions, config options, verify, memory, rename, delete.

import { diffView } from "./diff.js";
import { clip, el } from "./dom.js";
import { codeBlock } from "./markdown.js";
import { renderEntry, view as renderView } from "./render.js";
import { replayOverHttp } from "./replay.js";
import { confirmDelete, stateBadge } from "./sessions.js";
import { NOTICE as NOTICE_KEY, SessionState, VERDICT as VERDICT_KEY, textOf } from "./session.js";
import { VirtualList } from "./vlist.js";

const $ = (id) => document.getElementById(id);
const VERIFY = "crow/verify";
const MAX_TEXT_ATTACHMENT = 1_000_000;
const MAX_IMAGE_ATTACHMENT = 5_000_000;
const WATCH_LIMIT = 32; // of crow serve's 64 sessions a connection may hold

export class SessionView {
  constructor(app) {
    this.app = app;
    this.current = null; // SessionState
    this.info = null; // its session/list row
    this.asks = new Map(); // request id -> {params, resolve, node}
    this.attachments = [];
    this.list = new VirtualList($("history"), (entry) => renderEntry(entry, this.current));
    this.opening = 0;
    this.verify = null;
    // Sessions this connection watches (id -> idle now).  A connection may hold only
    // so many: past WATCH_LIMIT the oldest idle ones left behind are closed
    // (session/close; never a running one, whose turn that could cancel).
    this.watching = new Map();
    this.bind();
  }

  bind() {
    const prompt = $("prompt");
    prompt.addEventListener("keydown", (event) => {
      if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
        event.preventDefault();
        this.send();
      } else if (event.key === "Escape" && this.busy) {
        event.preventDefault();
        this.cancel();
      }
    });
    $("composer").addEventListener("submit", (event) => {
      event.preventDefault();
      this.send();
    });
    $("cancel").addEventListener("click", () => this.cancel());
    $("attach").addEventListener("change", (event) => this.attach(event.target.files));
    $("rename").addEventListener("click", () => this.rename());
    $("delete-session").addEventListener("click", () => this.remove());
    for (const [button, panel] of [["open-settings", "settings-panel"], ["open-memory", "memory-panel"]]) {
      $(button).addEventListener("click", () => {
        const hidden = !$(panel).hidden;
        $(panel).hidden = hidden;
        $(button).setAttribute("aria-expanded", String(!hidden));
        if (!hidden) $(panel).querySelector("input, select, textarea, button").focus();
      });
    }
    $("verify-form").addEventListener("submit", (event) => {
      event.preventDefault();
      this.applyVerify();
    });
    $("memory-search").addEventListener("submit", (event) => {
      event.preventDefault();
      this.searchMemory();
    });
    $("memory-add").addEventListener("submit", (event) => {
      event.preventDefault();
      this.remember();
    });
  }

  get rpc() {
    return this.app.rpc;
  }

  get busy() {
    return Boolean(this.current) && this.current.state !== "idle";
  }

  async open(sessionId) {
    if (this.current && this.current.id === sessionId) return;
    const ticket = ++this.opening;
    this.close();
    const session = new SessionState(sessionId);
    session.hold(); // until the history is in (released by resume)
    this.current = session;
    this.lastState = null;
    this.said = null;
    session.listeners.add((what) => this.changed(what));
    $("session-title").textContent = "opening…";
    $("session-cwd").textContent = sessionId;
    $("composer-message").textContent = "";
    this.list.setItems(session.entries);
    this.list.scrollToBottom();
    let info;
    try {
      info = await this.find(sessionId);
    } catch (error) {
      session.release();
      $("session-title").textContent = "Session";
      $("composer-message").textContent = `The session could not be found: ${error.message}`;
      return;
    }
    if (ticket !== this.opening) return;
    if (!info) {
      session.release();
      $("session-title").textContent = "No such session";
      $("composer-message").textContent = `There is no session ${sessionId} (it may have been deleted).`;
      return;
    }
    this.info = info;
    session.title = info.title || null;
    this.header();
    const started = performance.now();
    // The history in bulk over HTTP, then live over the WebSocket from where it ended.
    session.replaying = true;
    this.list.pause(true);
    let from = { type: "start" };
    try {
      const params = { sessionId, cwd: info.cwd, mcpServers: [], replayFrom: { type: "start" } };
      await replayOverHttp(this.app.token, this.app.clientInfo, params, (update) => {
        if (this.current === session && update.sessionId === sessionId) session.apply(update);
      });
      if (session.lastSeq > 0) from = { type: "_crow/after", seq: session.lastSeq };
    } catch {
      // not over HTTP (a proxy that passes only the WebSocket): all of it over the WebSocket
    }
    if (this.current !== session) return;
    try {
      await this.resume(from);
    } catch {
      return; // said in the composer's message
    }
    this.watch(session.id);
    window.crowTimings = { openMs: performance.now() - started, entries: session.entries.length, over: from.type === "start" ? "websocket" : "http" };
    document.body.dataset.opened = session.id;
  }

  // The session's list row (its cwd, which resuming needs).
  async find(sessionId) {
    let cursor;
    for (let page = 0; page < 50; page++) {
      const answer = await this.rpc.request("session/list", cursor === undefined ? {} : { cursor });
      const found = (answer.sessions || []).find((s) => s.sessionId === sessionId);
      if (found) return found;
      if (answer.nextCursor === undefined || answer.nextCursor === null) return null;
      cursor = answer.nextCursor;
    }
    return null;
  }

  async resume(replayFrom, meta) {
    const session = this.current;
    if (!session || !this.info) return;
    const params = { sessionId: session.id, cwd: this.info.cwd, mcpServers: [] };
    if (replayFrom) params.replayFrom = replayFrom;
    if (meta) params._meta = meta;
    session.replaying = Boolean(replayFrom);
    this.list.pause(session.replaying); // a replay is drawn once, when it is all in
    try {
      const answer = await this.rpc.request("session/resume", params);
      if (this.current !== session) return answer;
      if (answer.configOptions) session.configOptions = answer.configOptions;
      if (answer.availableCommands) session.commands = answer.availableCommands;
      const verify = answer._meta ? answer._meta[VERIFY] : undefined;
      if (verify !== undefined) this.verify = verify;
      this.drawConfig();
      this.drawVerify();
      return answer;
    } catch (error) {
      $("composer-message").textContent = `The session could not be opened: ${error.message}`;
      throw error;
    } finally {
      session.release(); // (what came while opening; nothing otherwise)
      session.replaying = false;
      this.list.pause(false);
      this.header();
    }
  }

  close() {
    if (!this.current) return;
    if (this.watching.has(this.current.id)) this.watching.set(this.current.id, this.current.state === "idle" && !this.current.background.length);
    this.current.listeners.clear();
    this.current = null;
    this.info = null;
    this.attachments = [];
    this.drawAttachments();
    $("memory-list").replaceChildren(); // (a question asked stays until it is answered)
  }

  disconnected() {
    for (const id of [...this.asks.keys()]) this.dropAsk(id, false);
    this.watching.clear(); // a new connection watches nothing yet
  }

  watch(sessionId) {
    this.watching.delete(sessionId);
    this.watching.set(sessionId, false); // the newest last
    for (const [id, idle] of this.watching) {
      if (this.watching.size <= WATCH_LIMIT) break;
      if (!idle || (this.current && id === this.current.id)) continue;
      this.watching.delete(id);
      this.rpc.request("session/close", { sessionId: id }).catch(() => {}); // idle: nothing is cancelled
    }
  }

  // After a reconnect: on from the last update seen.
  async reconnected() {
    const session = this.current;
    if (!session || !this.info) return;
    const from = session.lastSeq > 0 ? { type: "_crow/after", seq: session.lastSeq } : { type: "start" };
    try {
      await this.resume(from);
      this.watch(session.id);
    } catch {
      // said in the composer's message
    }
  }

  update(params) {
    const session = this.current;
    if (!session || params.sessionId !== session.id) {
      const update = params.update || {};
      if (update.sessionUpdate === "state_update" && this.watching.has(params.sessionId)) {
        this.watching.set(params.sessionId, update.state === "idle" && !(update.background || []).length);
      }
      return;
    }
    session.take(params);
  }

  changed(what) {
    if (what.added || what.entry || what.removed) this.list.changed();
    const entry = what.entry || what.added;
    if (entry && entry.type === "message" && entry.role === "agent" && !this.current.replaying) this.stream(entry);
    if (what.header || what.state) this.header();
    if (what.config) this.drawConfig();
    if (what.queue) this.drawQueue();
    if (what.state && this.current) {
      const was = this.lastState;
      this.lastState = this.current.state;
      if (was && was !== "idle" && this.current.state === "idle" && !this.current.replaying) this.announceReply();
    }
  }

  // A screen reader hears a streaming reply in pieces: what is new, every 2 s at most.
  stream(entry) {
    if (entry.meta && (entry.meta[VERDICT_KEY] || entry.meta[NOTICE_KEY])) return;
    this.streaming = entry;
    if (this.streamTimer) return;
    this.streamTimer = setTimeout(() => {
      this.streamTimer = 0;
      const current = this.streaming;
      const text = textOf(current.content);
      const said = this.said && this.said.id === current.id ? this.said.length : 0;
      const fresh = text.slice(said).trim();
      this.said = { id: current.id, length: text.length };
      if (fresh) $("live").textContent = fresh;
    }, 2000);
  }

  announceReply() {
    const entries = this.current.entries;
    for (let i = entries.length - 1; i >= 0; i--) {
      const entry = entries[i];
      if (entry.type === "message" && entry.role === "agent") {
        const said = this.said && this.said.id === entry.id ? this.said.length : 0;
        const rest = textOf(entry.content).slice(said).trim();
        this.said = { id: entry.id, length: textOf(entry.content).length };
        $("live").textContent = (rest ? clip(rest, 600) + " " : "") + "(The turn ended.)";
        return;
      }
      if (entry.type === "message" && entry.role === "user") return;
    }
  }

  header() {
    const session = this.current;
    if (!session) return;
    $("session-title").textContent = session.title || (this.info && this.info.title) || "(untitled)";
    $("session-cwd").textContent = this.info ? `${this.info.cwd} · ${session.id}` : session.id;
    $("session-state").replaceWith(Object.assign(stateBadge(session.state), { id: "session-state" }));
    const usage = session.usage;
    $("usage").hidden = !usage;
    if (usage && usage.size) {
      const ratio = Math.min(1, usage.used / usage.size);
      $("usage-meter").value = ratio;
      $("usage-meter").high = 0.8;
      $("usage-meter").optimum = 0;
      const cost = usage.cost && usage.cost.amount !== undefined ? ` · ${usage.cost.amount} ${usage.cost.currency}` : "";
      $("usage-text").textContent = `${usage.used.toLocaleString()} / ${usage.size.toLocaleString()} tokens (${Math.round(ratio * 100)}%)${cost}`;
    }
    const busy = this.busy;
    $("cancel").hidden = !busy;
    const background = session.background.length ? ` · ${session.background.length} in the background` : "";
    const status = session.state === "requires_action" ? "waiting for your answer" : session.status || (busy ? "working…" : "");
    $("session-status").textContent = status + background;
  }

  // ---- prompting -------------------------------------------------------------------
  async send() {
    const session = this.current;
    if (!session) return;
    const text = $("prompt").value;
    if (!text.trim() && !this.attachments.length) return;
    const prompt = [];
    if (text.trim()) prompt.push({ type: "text", text });
    prompt.push(...this.attachments.map((a) => a.block));
    $("prompt").value = "";
    const attached = this.attachments;
    this.attachments = [];
    this.drawAttachments();
    $("composer-message").textContent = "";
    this.list.scrollToBottom();
    try {
      const answer = await this.rpc.request("session/prompt", { sessionId: session.id, prompt });
      if (answer && answer.messageId) {
        session.mine.add(answer.messageId);
        const entry = session.byKey.get("m:" + answer.messageId);
        if (entry) session.bump(entry);
      }
    } catch (error) {
      if (error.code === -32800) return; // withdrawn by a cancel: nothing was inserted
      $("composer-message").textContent = `Not sent: ${error.message}`;
      if (!$("prompt").value) $("prompt").value = text;
      this.attachments = attached;
      this.drawAttachments();
    }
  }

  cancel() {
    const session = this.current;
    if (!session) return;
    try {
      this.rpc.notify("session/cancel", { sessionId: session.id });
    } catch (error) {
      $("composer-message").textContent = `Not cancelled: ${error.message}`;
      return;
    }
    for (const [id, ask] of this.asks) if (ask.params.sessionId === session.id) this.dropAsk(id, true);
    $("session-status").textContent = "cancelling…";
  }

  async attach(files) {
    const prompt = (this.app.capabilities.session || {}).prompt || {};
    for (const file of files) {
      const isImage = file.type.startsWith("image/");
      if (isImage && !prompt.image) {
        $("composer-message").textContent = `${file.name}: this agent's model does not take images.`;
        continue;
      }
      if (!isImage && !prompt.embeddedContext) {
        $("composer-message").textContent = `${file.name}: this agent does not take attached files.`;
        continue;
      }
      if (file.size > (isImage ? MAX_IMAGE_ATTACHMENT : MAX_TEXT_ATTACHMENT)) {
        $("composer-message").textContent = `${file.name} is too large to attach.`;
        continue;
      }
      let block;
      if (isImage) {
        block = { type: "image", mimeType: file.type, data: await base64(file) };
      } else {
        const text = await file.text();
        if (text.includes("\u0000")) {
          $("composer-message").textContent = `${file.name} is not a text file.`;
          continue;
        }
        block = { type: "resource", resource: { uri: `file:///${encodeURIComponent(file.name)}`, text, mimeType: file.type || "text/plain" } };
      }
      this.attachments.push({ name: file.name, block });
    }
    $("attach").value = "";
    this.drawAttachments();
  }

  drawAttachments() {
    $("attachments").replaceChildren(
      ...this.attachments.map((a, n) => {
        const drop = el("button", { type: "button", className: "small-button", "aria-label": `Remove ${a.name}` }, "×");
        drop.addEventListener("click", () => {
          this.attachments.splice(n, 1);
          this.drawAttachments();
        });
        return el("span", { className: "chip" }, `${a.name} `, drop);
      }),
    );
  }

  drawQueue() {
    const queue = this.current ? this.current.queue : [];
    $("queue").hidden = !queue.length;
    $("queue").replaceChildren(
      el("div", { className: "small muted" }, `${queue.length} prompt${queue.length === 1 ? "" : "s"} waiting for the turn to end`),
      el("ol", {}, queue.map((p) => el("li", {}, (p.yours ? "you: " : p.from ? `${p.from}: ` : "") + clip(p.preview || "", 120)))),
    );
  }

  // ---- permission questions ----------------------------------------------------------
  ask(params, id) {
    return new Promise((resolve) => {
      const node = this.askCard(params, id);
      this.asks.set(id, { params, resolve, node });
      $("asks").append(node);
      const first = node.querySelector(".ask-options button");
      if (first) first.focus();
    });
  }

  askCard(params, id) {
    const session = this.current;
    const here = session && params.sessionId === session.id;
    if (here && params.subject && params.subject.type === "tool_call" && params.subject.toolCall) {
      // Its title and input as a tool-call patch; its content (the diff to allow) is
      // shown here, and the call's own updates bring it to the history.
      const { content, ...patch } = params.subject.toolCall;
      if (session.byKey.has("t:" + patch.toolCallId)) session.apply({ sessionId: session.id, update: { ...patch, sessionUpdate: "tool_call_update" } });
    }
    const options = Array.isArray(params.options) ? params.options : [];
    const buttons = options.map((option) => {
      const kind = String(option.kind || "");
      const button = el("button", { type: "button", className: kind.startsWith("reject") ? "danger" : kind.startsWith("allow") ? "primary" : "" }, String(option.name || option.optionId));
      button.addEventListener("click", () => this.answer(id, { outcome: { outcome: "selected", optionId: option.optionId } }));
      return button;
    });
    return el(
      "section",
      { className: "ask card", role: "alertdialog", "aria-label": `Permission: ${params.title || "the agent asks"}` },
      el("h2", {}, String(params.title || "The agent asks for permission")),
      here ? null : el("p", { className: "small" }, "in ", el("a", { href: `#/s/${encodeURIComponent(params.sessionId)}` }, `session ${params.sessionId}`)),
      params.description ? el("p", {}, String(params.description)) : null,
      this.whatItDoes(params),
      el("div", { className: "row wrap ask-options" }, buttons),
    );
  }

  // What allowing the request lets happen: the diff, the command and its folder, the URL.
  whatItDoes(params) {
    const subject = params.subject || {};
    if (subject.type === "command") {
      return el("div", { className: "part" }, codeBlock(`$ ${subject.command || ""}`, "bash"), el("div", { className: "muted small" }, `in ${subject.cwd || "?"}`));
    }
    if (subject.type !== "tool_call" || !subject.toolCall) return null;
    const call = subject.toolCall;
    const known = this.current && this.current.byKey.get("t:" + call.toolCallId);
    const raw = call.rawInput !== undefined ? call.rawInput : known ? known.rawInput : undefined;
    const parts = [];
    for (const item of call.content || []) {
      if (item && item.type === "diff") parts.push(diffView(item.patch && item.patch.text, renderView.layout, item.changes));
    }
    if (!parts.length && raw && typeof raw === "object") {
      if (typeof raw.command === "string") parts.push(codeBlock(`$ ${raw.command}`, "bash"), raw.cwd ? el("div", { className: "muted small" }, `in ${raw.cwd}`) : null);
      else if (typeof raw.url === "string") parts.push(el("div", { className: "url" }, raw.url));
      else parts.push(codeBlock(JSON.stringify(raw, null, 2), "json"));
    }
    return parts.length ? el("div", { className: "part what" }, parts) : null;
  }

  answer(id, result) {
    const ask = this.asks.get(id);
    if (!ask) return;
    this.asks.delete(id);
    ask.node.remove();
    ask.resolve(result);
    $("prompt").focus();
  }

  dropAsk(id, answerCancelled) {
    const ask = this.asks.get(id);
    if (!ask) return;
    this.asks.delete(id);
    ask.node.remove();
    if (answerCancelled) ask.resolve({ outcome: { outcome: "cancelled" } });
    else ask.resolve({ outcome: { outcome: "cancelled" } }); // the connection may be gone: harmless
  }

  cancelAsk(requestId) {
    this.dropAsk(requestId, true); // answered elsewhere (another client) or withdrawn
  }

  // ---- settings: config options and verify --------------------------------------------
  drawConfig() {
    const session = this.current;
    const box = $("config-options");
    if (!session) return box.replaceChildren();
    box.replaceChildren(
      ...session.configOptions.map((option) => {
        const id = `config-${option.configId}`;
        if (option.type === "boolean") {
          const input = el("input", { type: "checkbox", id, checked: Boolean(option.currentValue) });
          input.addEventListener("change", () => this.setConfig(option, "boolean", input.checked));
          return el("label", { className: "check" }, input, ` ${option.name}`);
        }
        if (option.type !== "select") return el("div", { className: "muted small" }, `${option.name}: ${String(option.currentValue)}`);
        const select = el("select", { id });
        for (const item of option.options || []) {
          if (Array.isArray(item.options)) {
            select.append(el("optgroup", { label: item.name }, item.options.map((o) => el("option", { value: o.value }, o.name))));
          } else {
            select.append(el("option", { value: item.value, title: item.description || "" }, item.name));
          }
        }
        select.value = option.currentValue;
        select.addEventListener("change", () => this.setConfig(option, "id", select.value));
        return el("div", { className: "stack" }, el("label", { for: id }, option.name), select, option.description ? el("span", { className: "muted small" }, option.description) : null);
      }),
    );
  }

  async setConfig(option, type, value) {
    const session = this.current;
    try {
      const answer = await this.rpc.request("session/set_config_option", { sessionId: session.id, configId: option.configId, type, value });
      session.configOptions = answer.configOptions || session.configOptions;
    } catch (error) {
      $("verify-message").textContent = `${option.name} not changed: ${error.message}`;
    }
    this.drawConfig();
  }

  drawVerify() {
    const verify = this.verify;
    $("verify-on").checked = Boolean(verify);
  }

  async applyVerify() {
    const on = $("verify-on").checked;
    let value = on;
    if (on) {
      const settings = {};
      const rounds = Number($("verify-rounds").value);
      if (rounds) settings.maxRounds = rounds;
      if ($("verify-rubric").value.trim()) settings.rubric = $("verify-rubric").value.trim();
      if ($("verify-check").value.trim()) settings.check = $("verify-check").value.trim();
      if (Object.keys(settings).length) value = settings;
    }
    $("verify-message").textContent = "";
    try {
      const answer = await this.resume(null, { [VERIFY]: value });
      this.verify = on;
      const proof = answer && answer._meta && answer._meta[VERIFY];
      $("verify-message").textContent = on ? `The judge checks each turn${proof && proof.verifier ? ` (${proof.verifier})` : ""}.` : "Verify is off.";
    } catch (error) {
      $("verify-message").textContent = `Not changed: ${error.message}`;
    }
  }

  // ---- memory ---------------------------------------------------------------------------
  async searchMemory() {
    const session = this.current;
    if (!session) return;
    $("memory-message").textContent = "";
    try {
      const answer = await this.rpc.request("_crow/memory/search", { sessionId: session.id, query: $("memory-query").value, limit: 20 });
      const memories = answer.memories || [];
      $("memory-list").replaceChildren(
        ...memories.map((memory) => {
          const forget = el("button", { type: "button", className: "danger small-button", "aria-label": `Forget ${clip(memory.text, 40)}` }, "Forget");
          forget.addEventListener("click", () => this.forget(memory));
          return el("li", {}, el("div", {}, String(memory.text)), el("div", { className: "muted small" }, [memory.scope, memory.created || memory.createdAt].filter(Boolean).join(" · ")), forget);
        }),
      );
      if (!memories.length) $("memory-message").textContent = "Nothing found.";
    } catch (error) {
      $("memory-message").textContent = `The memory could not be searched: ${error.message}`;
    }
  }

  async remember() {
    const session = this.current;
    const text = $("memory-text").value.trim();
    if (!session || !text) return;
    try {
      await this.rpc.request("_crow/memory/remember", { sessionId: session.id, text, scope: $("memory-scope").value });
      $("memory-text").value = "";
      if ($("memory-query").value) await this.searchMemory();
      $("memory-message").textContent = "Remembered.";
    } catch (error) {
      $("memory-message").textContent = `Not remembered: ${error.message}`;
    }
  }

  async forget(memory) {
    const session = this.current;
    try {
      const answer = await this.rpc.request("_crow/memory/forget", { sessionId: session.id, id: memory.id });
      if (answer && answer.forgotten === false) {
        $("memory-message").textContent = "It was already gone.";
        return this.searchMemory();
      }
      await this.searchMemory();
      $("memory-message").textContent = "Forgotten.";
    } catch (error) {
      $("memory-message").textContent = `Not forgotten: ${error.message}`;
    }
  }

  // ---- rename, delete --------------------------------------------------------------------
  rename() {
    const session = this.current;
    if (!session) return;
    const dialog = $("rename-dialog");
    $("rename-input").value = session.title || "";
    dialog.returnValue = "";
    dialog.addEventListener(
      "close",
      async () => {
        const title = $("rename-input").value.replace(/\s+/g, " ").trim();
        if (dialog.returnValue !== "ok" || !title) return;
        try {
          await this.rpc.request("session/prompt", { sessionId: session.id, prompt: [{ type: "text", text: `/title ${title}` }] });
        } catch (error) {
          $("composer-message").textContent = `Not renamed: ${error.message}`;
        }
      },
      { once: true },
    );
    dialog.showModal();
  }

  async remove() {
    const session = this.current;
    if (!session) return;
    if (!(await confirmDelete(session.title || session.id))) return;
    try {
      await this.rpc.request("session/delete", { sessionId: session.id });
    } catch (error) {
      $("composer-message").textContent = `Not deleted: ${error.message}`;
      return;
    }
    location.hash = "#/";
  }
}

function base64(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

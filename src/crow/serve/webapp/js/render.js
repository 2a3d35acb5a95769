// One history entry (see session.js) drawn as DOM.  Text from the model or from tools
// is set as text, or as Markdown sanitized by markdown.js: never as live HTML.

import { diffView } from "./diff.js";
import { clip, el, verdictBadge } from "./dom.js";
import { codeBlock, markdown } from "./markdown.js";
import { DIFF, JUDGING, NOTICE, RECALLED, VERDICT, textOf } from "./session.js";

const FOLD_LINES = 24;
const FOLD_CHARS = 4000;
const STATUS_MARKS = { pending: "·", in_progress: "…", completed: "✓", failed: "✗", cancelled: "⊘" };

// Page-wide view choices (the diff layout, what is unfolded): kept in memory only.
export const view = { layout: { split: window.matchMedia("(min-width: 900px)").matches }, open: new Map() };

export function renderEntry(entry, session) {
  switch (entry.type) {
    case "message":
      return message(entry, session);
    case "tool":
      return toolCall(entry, session);
    case "terminal":
      return el("article", { className: "entry terminal-entry" }, terminal(session.terminalOf(entry.id)));
    case "plan":
      return plan(entry);
    case "notice":
      return notice(entry.severity, entry.title, entry.description);
    case "end":
      return turnEnd(entry);
    default:
      return el("div", { className: "entry" });
  }
}

// A <details> whose open state survives redraws (keyed by entry and part).
function folding(key, openByDefault, summary, ...body) {
  const head = el("summary", {}, summary);
  const details = el("details", { className: "fold" }, head, ...body);
  details.open = view.open.has(key) ? view.open.get(key) : openByDefault;
  // Kept at the click (a redraw may come before the toggle event) and at the toggle.
  head.addEventListener("click", () => view.open.set(key, !details.open));
  details.addEventListener("toggle", () => view.open.set(key, details.open));
  return details;
}

function blocks(content, key, breaks = false) {
  const out = [];
  const texts = [];
  const flushText = () => {
    if (texts.length) out.push(el("div", { className: "md" }, markdown(texts.join(""), breaks)));
    texts.length = 0;
  };
  for (const block of content || []) {
    if (!block) continue;
    if (block.type === "text") {
      texts.push(block.text || "");
      continue;
    }
    flushText();
    if (block.type === "image" && typeof block.data === "string" && /^image\/(png|jpeg|gif|webp)$/.test(block.mimeType || "")) {
      out.push(el("img", { className: "attached-image", src: `data:${block.mimeType};base64,${block.data}`, alt: "attached image" }));
    } else if (block.type === "resource" && block.resource) {
      const res = block.resource;
      const name = String(res.uri || "").split("/").pop() || "attachment";
      out.push(folding(key + ":" + res.uri, false, `attached: ${name}`, typeof res.text === "string" ? el("pre", { className: "output" }, res.text) : el("p", {}, "(binary)")));
    } else if (block.type === "resource_link") {
      out.push(el("div", { className: "chip" }, `link: ${block.name || block.uri}`));
    } else {
      out.push(el("div", { className: "chip" }, `[${block.type}]`));
    }
  }
  flushText();
  return out;
}

function message(entry, session) {
  const meta = entry.meta || {};
  if (entry.role === "thought") {
    const text = textOf(entry.content);
    return el(
      "article",
      { className: "entry thought" },
      folding(entry.key, false, el("span", {}, "Thought ", el("span", { className: "muted" }, clip(text, 80))), el("div", { className: "md" }, markdown(text))),
    );
  }
  if (meta[VERDICT] && typeof meta[VERDICT] === "object") return verdict(meta[VERDICT], textOf(entry.content));
  if (meta[NOTICE]) return notice(meta[NOTICE], textOf(entry.content));
  if (entry.role === "user") {
    const who = session.whoSaid(entry);
    const label = who === "you" ? "You" : who === "judge" ? "The judge" : who ? `From ${who}` : "Prompt";
    return el("article", { className: "entry user" + (who === "judge" ? " judge" : ""), "aria-label": label }, el("div", { className: "who" }, label), ...blocks(entry.content, entry.key, true));
  }
  const model = meta["crow/model"];
  return el("article", { className: "entry agent", "aria-label": "Agent" }, ...blocks(entry.content, entry.key), model ? el("div", { className: "muted small" }, model) : null);
}


function verdict(data, text) {
  const reasons = Array.isArray(data.reasons) ? data.reasons : [];
  const round = data.round && data.maxRounds ? `round ${data.round} of ${data.maxRounds}` : "";
  return el(
    "article",
    { className: "entry verdict", "aria-label": `Verdict: ${data.verdict || "unknown"}` },
    el("div", { className: "verdict-head" }, verdictBadge(data.verdict), el("span", {}, "Judge's verdict"), el("span", { className: "muted small" }, [round, data.judgeModel, data.verifier].filter(Boolean).join(" · "))),
    reasons.length ? el("ul", { className: "reasons" }, reasons.map((r) => el("li", {}, String(r)))) : el("p", {}, text),
  );
}

function notice(severity, title, description) {
  const level = ["info", "warning", "error"].includes(severity) ? severity : "info";
  return el("aside", { className: `entry notice notice-${level}`, role: level === "error" ? "alert" : "note" }, el("strong", {}, level === "info" ? "crow: " : `crow ${level}: `), String(title || ""), description ? el("div", { className: "small" }, String(description)) : null);
}

function turnEnd(entry) {
  const reason = entry.stopReason || "end_turn";
  const text = {
    end_turn: "turn ended",
    cancelled: "turn cancelled",
    max_tokens: "stopped: the model hit its token limit",
    max_turn_requests: "stopped: the turn used all its model requests",
    refusal: "the model refused",
    error: "turn failed",
  }[reason] || `turn ended: ${reason}`;
  const error = entry.error && entry.error.message ? `: ${entry.error.message}` : "";
  return el("div", { className: `entry turn-end stop-${reason === "end_turn" ? "ok" : "other"}`, role: "separator" }, el("span", {}, text + error));
}

function plan(entry) {
  const p = entry.plan;
  if (p.type === "markdown") return el("article", { className: "entry plan" }, el("h3", {}, "Plan"), el("div", { className: "md" }, markdown(p.content || "")));
  const items = Array.isArray(p.entries) ? p.entries : [];
  const done = items.filter((i) => i.status === "completed").length;
  return el(
    "article",
    { className: "entry plan" },
    el("h3", {}, `Plan (${done}/${items.length})`),
    el(
      "ul",
      { className: "checklist" },
      items.map((item) => {
        const status = item.status || "pending";
        const mark = status === "completed" ? "☑" : status === "in_progress" ? "◐" : status === "cancelled" ? "☒" : "☐";
        return el("li", { className: `plan-${status}` }, el("span", { className: "mark", "aria-label": status.replace("_", " ") }, mark), el("span", {}, String(item.content || "")), item.priority === "high" ? el("span", { className: "badge" }, "high") : null);
      }),
    ),
  );
}

function longText(key, text, label) {
  const lines = text.split("\n").length;
  const pre = el("pre", { className: "output" }, text);
  if (lines <= FOLD_LINES && text.length <= FOLD_CHARS) return el("div", { className: "part" }, el("div", { className: "part-label" }, label), pre);
  return folding(key, false, `${label} (${lines} lines)`, pre);
}

function inputText(raw) {
  if (raw === undefined || raw === null) return null;
  if (typeof raw === "string") return raw;
  if (typeof raw.command === "string") return "$ " + raw.command + (raw.cwd ? `\n(in ${raw.cwd})` : "");
  try {
    return JSON.stringify(raw, null, 2);
  } catch {
    return String(raw);
  }
}

function outputText(raw) {
  if (raw === undefined || raw === null) return null;
  if (typeof raw === "string") return raw;
  if (typeof raw.text === "string") return raw.text;
  if (Array.isArray(raw.content)) return textOf(raw.content) || null;
  try {
    return JSON.stringify(raw, null, 2);
  } catch {
    return String(raw);
  }
}

export function terminal(term) {
  if (!term) return el("div", { className: "muted" }, "(terminal)");
  const text = new TextDecoder().decode(term.bytes).replace(/\x1b\[[0-9;?]*[ -/]*[@-~]/g, "").replace(/\x1b[\]P^_][^\x07\x1b]*(\x07|\x1b\\)?/g, "").replace(/\r(?!\n)/g, "\n");
  const exit = term.exitStatus ? ` · exited ${term.exitStatus.exitCode ?? term.exitStatus.signal ?? ""}` : term.exitStatus === undefined ? " · running" : "";
  const head = el("div", { className: "term-head" }, `$ ${term.command || "terminal"}`, el("span", { className: "muted small" }, (term.cwd ? ` in ${term.cwd}` : "") + exit));
  return el("div", { className: "terminal" }, head, longText("term:" + term.id, text, "output"));
}

function toolCall(entry, session) {
  const meta = entry.meta || {};
  if (meta[JUDGING]) {
    const busy = entry.status === "in_progress" || entry.status === "pending";
    return el("div", { className: "entry judging", role: "status" }, busy ? "The judge is checking the turn…" : `The judge checked the turn (${entry.status})`);
  }
  if (meta[RECALLED]) {
    const texts = [];
    for (const item of entry.content) if (item && item.type === "content" && item.content) texts.push(textOf([item.content]));
    return el(
      "article",
      { className: "entry recalled" },
      el("h3", {}, "Recalled from memory"),
      el("ul", {}, texts.flatMap((t) => t.split("\n").filter((l) => l.trim())).map((line) => el("li", {}, line))),
    );
  }
  const status = entry.status || "pending";
  const title = entry.title || meta["crow/tool"] || entry.id;
  const parts = [];
  const input = inputText(entry.rawInput);
  let hasDiff = false;
  for (const [n, item] of entry.content.entries()) {
    if (!item) continue;
    if (item.type === "diff") {
      hasDiff = true;
      parts.push(diffView(item.patch && item.patch.text, view.layout, item.changes));
    } else if (item.type === "terminal") {
      parts.push(terminal(session.terminalOf(item.terminalId)));
    } else if (item.type === "content" && item.content) {
      const text = item.content.type === "text" ? item.content.text || "" : null;
      parts.push(text !== null ? longText(`${entry.key}:c${n}`, text, "output") : el("div", {}, ...blocks([item.content], `${entry.key}:c${n}`)));
    }
  }
  const output = outputText(entry.rawOutput);
  const diffMeta = entry.rawOutput && typeof entry.rawOutput === "object" && entry.rawOutput._meta ? entry.rawOutput._meta[DIFF] : meta[DIFF];
  if (!hasDiff && diffMeta && diffMeta.patch) parts.push(diffView(diffMeta.patch, view.layout, diffMeta.changes));
  if (!entry.content.length && output) parts.push(longText(entry.key + ":out", output, status === "failed" ? "error" : "output"));
  const locations = Array.isArray(entry.locations) ? entry.locations.filter((l) => l && l.path) : [];
  const summary = el(
    "span",
    { className: "tool-summary" },
    el("span", { className: `status status-${status}`, "aria-label": status.replace("_", " ") }, STATUS_MARKS[status] || "?"),
    el("span", { className: "tool-title" }, String(title)),
    el("span", { className: "muted small" }, entry.kind && entry.kind !== "other" ? entry.kind : ""),
  );
  const shownDiff = hasDiff || Boolean(diffMeta && diffMeta.patch);
  const body = [
    input ? (shownDiff || input.split("\n").length > FOLD_LINES ? folding(entry.key + ":in", false, "input", codeBlock(input)) : el("div", { className: "part" }, el("div", { className: "part-label" }, "input"), codeBlock(input, entry.rawInput && typeof entry.rawInput === "object" && !entry.rawInput.command ? "json" : "bash"))) : null,
    locations.length ? el("div", { className: "muted small" }, locations.map((l) => l.path + (l.line ? `:${l.line}` : "")).join(", ")) : null,
    ...parts,
  ];
  const open = status === "in_progress" || status === "failed" || hasDiff || Boolean(diffMeta);
  return el("article", { className: `entry tool tool-${status}` }, folding(entry.key, open, summary, ...body));
}

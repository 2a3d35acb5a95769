// The sessions list: title, folder, last activity, state, last verdict; search,
// folder filter, judge sessions on demand; create and delete.

import { clip, el, relativeTime, verdictBadge } from "./dom.js";

const $ = (id) => document.getElementById(id);
const MAX_PAGES = 20;
const STATE_LABELS = { idle: "idle", running: "running", requires_action: "waiting for permission" };

export function stateBadge(state) {
  const known = STATE_LABELS[state] ? state : "running";
  return el("span", { className: `badge state-${known}` }, STATE_LABELS[state] || String(state || "busy"));
}

export class SessionsView {
  constructor(app) {
    this.app = app;
    this.rows = [];
    this.loading = null;
    $("search").addEventListener("input", () => this.draw());
    $("cwd-filter").addEventListener("change", () => this.draw());
    $("show-judges").addEventListener("change", () => this.draw());
    $("refresh").addEventListener("click", () => this.load());
    $("new-session").addEventListener("submit", (event) => {
      event.preventDefault();
      this.create();
    });
  }

  async load() {
    const rpc = this.app.rpc;
    $("list-message").textContent = "loading…";
    const rows = [];
    let cursor;
    try {
      for (let page = 0; page < MAX_PAGES; page++) {
        const answer = await rpc.request("session/list", cursor === undefined ? {} : { cursor });
        rows.push(...(answer.sessions || []));
        if (answer.nextCursor === undefined || answer.nextCursor === null) break;
        cursor = answer.nextCursor;
      }
    } catch (error) {
      $("list-message").textContent = `The sessions could not be listed: ${error.message}`;
      return;
    }
    this.rows = rows;
    const cwds = [...new Set(rows.map((r) => r.cwd).filter(Boolean))].sort();
    const filter = $("cwd-filter");
    const chosen = filter.value;
    filter.replaceChildren(el("option", { value: "" }, "all folders"), ...cwds.map((c) => el("option", { value: c }, c)));
    filter.value = cwds.includes(chosen) ? chosen : "";
    $("cwd-list").replaceChildren(...cwds.map((c) => el("option", { value: c })));
    // A suggestion only while nobody is typing there: the list may land mid-typing.
    const folder = $("new-cwd");
    if (!folder.value && document.activeElement !== folder && rows.length) folder.value = rows[0].cwd;
    this.draw();
  }

  // A session/update for any session this connection watches: its row's state.
  observe(params) {
    const update = params.update || {};
    const row = this.rows.find((r) => r.sessionId === params.sessionId);
    if (!row) return;
    row._meta = row._meta || {};
    if (update.sessionUpdate === "state_update") row._meta["crow/state"] = update.state;
    else if (update.sessionUpdate === "session_info_update" && "title" in update) row.title = update.title;
    else return;
    if (!$("sessions-view").hidden) this.draw();
  }

  draw() {
    const query = $("search").value.trim().toLowerCase();
    const cwd = $("cwd-filter").value;
    const judges = $("show-judges").checked;
    const shown = this.rows.filter((row) => {
      const meta = row._meta || {};
      if (!judges && meta["crow/judgeOf"]) return false;
      if (cwd && row.cwd !== cwd) return false;
      if (!query) return true;
      return [row.title, row.cwd, row.sessionId].some((f) => String(f || "").toLowerCase().includes(query));
    });
    const list = $("session-list");
    list.replaceChildren(...shown.map((row) => this.row(row)));
    const hidden = this.rows.length - shown.length;
    $("list-message").textContent = this.rows.length === 0 ? "No sessions yet: create one above." : shown.length === 0 ? "No session matches." : hidden ? `${shown.length} shown, ${hidden} filtered out` : `${shown.length} sessions`;
  }

  row(row) {
    const meta = row._meta || {};
    const verdict = meta["crow/verdict"];
    const title = row.title || "(untitled)";
    const open = el("a", { href: `#/s/${encodeURIComponent(row.sessionId)}`, className: "session-link" }, clip(title, 120));
    const remove = el("button", { type: "button", className: "danger small-button", "aria-label": `Delete ${title}` }, "Delete");
    remove.addEventListener("click", () => this.remove(row));
    const stop = meta["crow/stopReason"];
    return el(
      "li",
      { className: "session-row" },
      el("div", { className: "row-main" }, open, el("div", { className: "muted small" }, row.cwd, " · ", row.sessionId)),
      el(
        "div",
        { className: "row-facts" },
        el("time", { dateTime: row.updatedAt || "", title: row.updatedAt || "" }, relativeTime(row.updatedAt)),
        stateBadge(meta["crow/state"] || "idle"),
        stop && stop !== "end_turn" ? el("span", { className: "badge" }, stop) : null,
        verdict && typeof verdict === "object" ? el("span", { className: "verdict-cell", title: String(verdict.text || "") }, verdictBadge(verdict.verdict)) : null,
        remove,
      ),
    );
  }

  async create() {
    const cwd = $("new-cwd").value.trim();
    $("new-message").textContent = "";
    if (!cwd.startsWith("/")) {
      $("new-message").textContent = "The folder must be an absolute path (it starts with /).";
      return;
    }
    const params = { cwd, mcpServers: [] };
    if ($("new-verify").checked) params._meta = { "crow/verify": true };
    try {
      const answer = await this.app.rpc.request("session/new", params);
      location.hash = `#/s/${encodeURIComponent(answer.sessionId)}`;
    } catch (error) {
      $("new-message").textContent = `No session was made: ${error.message}`;
    }
  }

  async remove(row) {
    if (!(await confirmDelete(row.title || row.sessionId))) return;
    try {
      await this.app.rpc.request("session/delete", { sessionId: row.sessionId });
    } catch (error) {
      $("list-message").textContent = `Not deleted: ${error.message}`;
      return;
    }
    this.rows = this.rows.filter((r) => r.sessionId !== row.sessionId);
    this.draw();
  }
}

export function confirmDelete(name) {
  const dialog = $("confirm-dialog");
  $("confirm-text").textContent = `Delete the session “${clip(name, 80)}”? Its history goes with it.`;
  return new Promise((resolve) => {
    dialog.returnValue = "";
    dialog.addEventListener("close", () => resolve(dialog.returnValue === "ok"), { once: true });
    dialog.showModal();
  });
}

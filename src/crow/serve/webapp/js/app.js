// The page: the token, the connection to /acp, and the two views (the sessions, one
// session).  The routes are in the fragment: #/ and #/s/<sessionId>.

import { Rpc } from "./rpc.js";
import { SessionsView } from "./sessions.js";

// The session view (Markdown, highlighting, diffs) loads when first wanted, or once
// the list is up: the list does not wait for it.
let sessionView = null;
function loadSessionView() {
  sessionView = sessionView || import("./view.js");
  return sessionView;
}

const TOKEN_KEY = "crow.token";
const VERSION = "2.0.0";
const $ = (id) => document.getElementById(id);

// The token leaves the address bar (and history) before anything else runs.
function takeToken() {
  const url = new URL(location.href);
  const hash = new URLSearchParams(url.hash.replace(/^#\/?/, ""));
  const found = hash.get("token") || url.searchParams.get("token");
  if (found) {
    sessionStorage.setItem(TOKEN_KEY, found);
    url.searchParams.delete("token");
    url.hash = "#/";
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

class App {
  constructor() {
    this.rpc = null;
    this.agent = null; // the initialize answer
    this.connected = false;
    this.retry = 0;
    this.sessions = new SessionsView(this);
    this.session = null; // a SessionView, once loaded
    this.permissionHandler = null;
    $("login-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const token = $("login-token").value.trim();
      if (!token) return;
      sessionStorage.setItem(TOKEN_KEY, token);
      $("login-token").value = "";
      this.start();
    });
    window.addEventListener("hashchange", () => this.route());
  }

  setConnection(text, kind = "") {
    const node = $("connection");
    node.textContent = text;
    node.className = "connection " + kind;
  }

  showOnly(id) {
    for (const view of document.querySelectorAll(".view")) view.hidden = view.id !== id;
  }

  login(message) {
    this.showOnly("login-view");
    $("login-message").textContent = message || "";
    this.setConnection("not connected", "bad");
    $("login-token").focus();
  }

  async start() {
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (!token) {
      this.login("Open the URL crow serve printed (it holds the token), or paste the token here.");
      return;
    }
    this.setConnection("connecting…");
    try {
      await this.connect(token);
    } catch (error) {
      const refused = await this.tokenRefused(token);
      if (refused) {
        sessionStorage.removeItem(TOKEN_KEY);
        this.login("The server refused this token. Use the URL or token that crow serve --http printed when it started (a restart with --new-token makes a new one).");
      } else {
        this.reconnectLater(String(error.message || error));
      }
      return;
    }
    this.route();
  }

  // The browser does not say why a WebSocket closed: ask the HTTP side.
  async tokenRefused(token) {
    const abort = new AbortController();
    try {
      const answer = await fetch("/acp", { method: "GET", headers: { Authorization: `Bearer ${token}` }, cache: "no-store", signal: abort.signal });
      return answer.status === 401;
    } catch {
      return false;
    } finally {
      abort.abort(); // a stream the server opened is not wanted
    }
  }

  async connect(token) {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const rpc = new Rpc(`${scheme}${location.host}/acp?token=${encodeURIComponent(token)}`);
    rpc.onNotification = (method, params) => this.notification(method, params);
    rpc.onRequest = (method, params, id) => this.request(method, params, id);
    rpc.onCancelRequest = (params) => this.session && this.session.cancelAsk(params.requestId);
    rpc.onClose = () => {
      this.connected = false;
      if (this.session) this.session.disconnected();
      this.reconnectLater("the connection closed");
    };
    await rpc.connect();
    this.rpc = rpc;
    this.agent = await rpc.request("initialize", {
      protocolVersion: 2,
      info: this.clientInfo,
      capabilities: {},
    });
    this.connected = true;
    this.retry = 0;
    const info = this.agent.info || {};
    this.setConnection(`connected to ${info.title || info.name || "the agent"}`, "good");
  }

  reconnectLater(why) {
    const delay = Math.min(5000, 400 * 2 ** this.retry++);
    this.setConnection(`${why}: reconnecting…`, "bad");
    clearTimeout(this.retryTimer);
    this.retryTimer = setTimeout(async () => {
      const token = sessionStorage.getItem(TOKEN_KEY);
      if (!token) return this.login("");
      try {
        await this.connect(token);
      } catch {
        if (await this.tokenRefused(token)) {
          sessionStorage.removeItem(TOKEN_KEY);
          return this.login("The server refused this token. Use the URL or token that crow serve --http printed.");
        }
        return this.reconnectLater("not reachable");
      }
      if (this.session && this.session.current) this.session.reconnected();
      else this.route();
    }, delay);
  }

  get token() {
    return sessionStorage.getItem(TOKEN_KEY);
  }

  get clientInfo() {
    return { name: "crow-web", title: "Crow web app", version: VERSION };
  }

  get capabilities() {
    return (this.agent && this.agent.capabilities) || {};
  }

  notification(method, params) {
    if (method === "session/update") {
      this.sessions.observe(params);
      if (this.session) this.session.update(params);
    }
  }

  async request(method, params, id) {
    if (method === "session/request_permission") return (await this.sessionView()).ask(params, id);
    const error = new Error(`the web app does not handle ${method}`);
    error.code = -32601;
    throw error;
  }

  async sessionView() {
    if (!this.session) {
      const { SessionView } = await loadSessionView();
      this.session = this.session || new SessionView(this);
    }
    return this.session;
  }

  async route() {
    if (!this.connected) return;
    const hash = location.hash || "#/";
    const open = /^#\/s\/([^/?#]+)/.exec(hash);
    if (open) {
      this.showOnly("session-view");
      (await this.sessionView()).open(decodeURIComponent(open[1]));
    } else {
      if (this.session) this.session.close();
      this.showOnly("sessions-view");
      await this.sessions.load();
      setTimeout(loadSessionView, 0); // ready before it is asked for
    }
  }
}

takeToken();
const app = new App();
window.crowApp = app; // for the browser tests and the bench
app.start();

// JSON-RPC 2.0 over one WebSocket to crow serve's /acp: requests with ids,
// notifications both ways, and the agent's own requests (session/request_permission)
// answered by a handler the page sets.  One JSON message per frame.

export class RpcError extends Error {
  constructor(error) {
    super(error && typeof error.message === "string" ? error.message : "request failed");
    this.code = error ? error.code : undefined;
    this.data = error ? error.data : undefined;
  }
}

export class Rpc {
  constructor(url) {
    this.url = url;
    this.nextId = 1;
    this.pending = new Map(); // id -> {resolve, reject}
    this.onNotification = () => {};
    this.onRequest = async () => {
      throw new RpcError({ code: -32601, message: "method not found" });
    };
    this.onCancelRequest = () => {}; // $/cancel_request for one of the agent's requests
    this.onClose = () => {};
    this.ws = null;
    this.open = false;
  }

  // Resolves once the socket is open; rejects if it closes first.
  connect() {
    return new Promise((resolve, reject) => {
      const ws = new WebSocket(this.url);
      this.ws = ws;
      ws.addEventListener("open", () => {
        this.open = true;
        resolve();
      });
      ws.addEventListener("message", (event) => this.receive(event.data));
      ws.addEventListener("close", (event) => {
        const wasOpen = this.open;
        this.open = false;
        for (const { reject: fail } of this.pending.values()) {
          fail(new RpcError({ code: -32000, message: "the connection closed" }));
        }
        this.pending.clear();
        if (wasOpen) this.onClose(event);
        else reject(new Error("the connection was refused"));
      });
    });
  }

  close() {
    if (this.ws) this.ws.close();
  }

  send(message) {
    if (!this.open) throw new RpcError({ code: -32000, message: "not connected" });
    this.ws.send(JSON.stringify({ jsonrpc: "2.0", ...message }));
  }

  request(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      try {
        this.send({ id, method, params });
      } catch (error) {
        this.pending.delete(id);
        reject(error);
      }
    });
  }

  notify(method, params = {}) {
    this.send({ method, params });
  }

  receive(text) {
    let message;
    try {
      message = JSON.parse(text);
    } catch {
      return; // not JSON: nothing to answer
    }
    for (const one of Array.isArray(message) ? message : [message]) this.dispatch(one);
  }

  dispatch(message) {
    if (!message || typeof message !== "object") return;
    if (typeof message.method === "string") {
      if (message.id === undefined || message.id === null) {
        if (message.method === "$/cancel_request") this.onCancelRequest(message.params || {});
        else this.onNotification(message.method, message.params || {});
        return;
      }
      this.answer(message);
      return;
    }
    const waiting = this.pending.get(message.id);
    if (!waiting) return;
    this.pending.delete(message.id);
    if (message.error) waiting.reject(new RpcError(message.error));
    else waiting.resolve(message.result);
  }

  async answer(message) {
    try {
      const result = await this.onRequest(message.method, message.params || {}, message.id);
      if (this.open) this.send({ id: message.id, result: result ?? {} });
    } catch (error) {
      const code = error instanceof RpcError && error.code ? error.code : -32603;
      if (this.open) this.send({ id: message.id, error: { code, message: String(error.message) } });
    }
  }
}

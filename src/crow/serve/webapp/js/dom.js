// Small DOM helpers: elements built with text children only (never innerHTML).

// el("div", {className, onclick...}, child, "text", ...): strings become text nodes.
export function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "className") node.className = value;
    else if (key === "colSpan") node.colSpan = value;
    else if (key.startsWith("on") && typeof value === "function") node.addEventListener(key.slice(2), value);
    else if (key in node && typeof value !== "string") node[key] = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" || typeof child === "number" ? document.createTextNode(String(child)) : child);
  }
  return node;
}

export function relativeTime(iso) {
  if (!iso) return "";
  const then = Date.parse(iso);
  if (Number.isNaN(then)) return String(iso);
  const seconds = Math.round((Date.now() - then) / 1000);
  if (seconds < 45) return "just now";
  const minutes = Math.round(seconds / 60);
  if (minutes < 60) return `${minutes} min ago`;
  const hours = Math.round(minutes / 60);
  if (hours < 24) return `${hours} h ago`;
  const days = Math.round(hours / 24);
  if (days < 30) return `${days} d ago`;
  return new Date(then).toLocaleDateString();
}

export function clip(text, limit) {
  const one = String(text || "").replace(/\s+/g, " ").trim();
  return one.length <= limit ? one : one.slice(0, limit - 1) + "…";
}

// A judge's verdict as a badge: pass, fail or unknown.
export function verdictBadge(value) {
  const kind = ["pass", "fail"].includes(value) ? value : "unknown";
  return el("span", { className: `badge verdict-${kind}` }, kind === "pass" ? "✓ pass" : kind === "fail" ? "✗ fail" : "? unknown");
}

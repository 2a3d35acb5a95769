// Markdown to safe DOM: marked parses, highlight.js colours code blocks, DOMPurify
// removes anything active (scripts, event handlers, forms, styles, frames, images
// from elsewhere).  Whatever a model or tool writes ends up as inert markup.

import { Marked } from "../vendor/marked.esm.js";
import DOMPurify from "../vendor/purify.es.mjs";
import hljs from "../vendor/highlight.min.js";

const marked = new Marked({
  gfm: true,
  breaks: false,
  renderer: {
    code({ text, lang }) {
      const language = (lang || "").trim().split(/\s+/)[0];
      let html;
      if (language && hljs.getLanguage(language)) {
        html = hljs.highlight(text, { language, ignoreIllegals: true }).value;
      } else if (text.length < 20000) {
        html = hljs.highlightAuto(text).value;
      } else {
        html = escapeHtml(text);
      }
      const label = language ? ` data-lang="${escapeHtml(language)}"` : "";
      return `<pre class="code"${label}><code class="hljs">${html}</code></pre>`;
    },
    html({ text }) {
      return escapeHtml(text); // raw HTML in Markdown is shown, never run
    },
  },
});

const PURIFY = {
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "img", "svg", "math", "iframe", "object", "embed", "video", "audio", "source", "link", "meta", "base"],
  FORBID_ATTR: ["style", "srcset", "action", "formaction"],
  ALLOW_DATA_ATTR: true,
  RETURN_DOM_FRAGMENT: true,
};

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    const href = node.getAttribute("href") || "";
    if (!/^(https?:|mailto:|#)/i.test(href)) node.removeAttribute("href");
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
});

export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

// A DocumentFragment of `text` rendered as Markdown, sanitized.  `breaks`: every
// newline is a line break (what a person typed in the prompt box).
export function markdown(text, breaks = false) {
  let html;
  try {
    html = marked.parse(String(text), { async: false, breaks });
  } catch {
    html = `<pre>${escapeHtml(text)}</pre>`;
  }
  return DOMPurify.sanitize(html, PURIFY);
}

// Plain code, highlighted when the language is known (no Markdown).
export function codeBlock(text, language) {
  const pre = document.createElement("pre");
  pre.className = "code";
  const code = document.createElement("code");
  code.className = "hljs";
  if (language && hljs.getLanguage(language) && text.length < 50000) {
    const html = hljs.highlight(text, { language, ignoreIllegals: true }).value;
    code.append(DOMPurify.sanitize(html, PURIFY));
  } else {
    code.textContent = text;
  }
  pre.append(code);
  return pre;
}

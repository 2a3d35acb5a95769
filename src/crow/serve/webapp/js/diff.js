// A git patch (a write's or an edit's _meta["crow/diff"].patch, or a diff tool-call
// content's patch.text) drawn as a unified or a side-by-side diff.  Every line is
// set as text.

import { el } from "./dom.js";

// [{path, oldPath, isNew, isDeleted, hunks: [{header, lines: [{t: " "|"+"|"-", text, old, new}]}]}]
export function parsePatch(text) {
  const files = [];
  let file = null;
  let hunk = null;
  let oldLine = 0;
  let newLine = 0;
  for (const line of String(text || "").split("\n")) {
    if (line.startsWith("diff --git ")) {
      file = { path: line.slice(11).split(" ").pop(), oldPath: null, isNew: false, isDeleted: false, hunks: [] };
      files.push(file);
      hunk = null;
      continue;
    }
    if (!file) {
      file = { path: "", oldPath: null, isNew: false, isDeleted: false, hunks: [] };
      files.push(file);
    }
    if (!hunk) {
      if (line.startsWith("new file mode")) file.isNew = true;
      else if (line.startsWith("deleted file mode")) file.isDeleted = true;
      else if (line.startsWith("--- ")) file.oldPath = stripPrefix(line.slice(4));
      else if (line.startsWith("+++ ")) file.path = stripPrefix(line.slice(4));
    }
    const header = /^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$/.exec(line);
    if (header) {
      hunk = { header: line, lines: [] };
      file.hunks.push(hunk);
      oldLine = Number(header[1]);
      newLine = Number(header[2]);
      continue;
    }
    if (!hunk) continue;
    const mark = line[0];
    if (mark === "+") hunk.lines.push({ t: "+", text: line.slice(1), old: null, new: newLine++ });
    else if (mark === "-") hunk.lines.push({ t: "-", text: line.slice(1), old: oldLine++, new: null });
    else if (mark === " ") hunk.lines.push({ t: " ", text: line.slice(1), old: oldLine++, new: newLine++ });
    else if (line.startsWith("\\")) hunk.lines.push({ t: "\\", text: line, old: null, new: null });
  }
  return files.filter((f) => f.hunks.length || f.path);
}

function stripPrefix(path) {
  if (path === "/dev/null") return null;
  return path.replace(/^[ab]\//, "");
}

function cell(text, className) {
  return el("td", { className }, text === null || text === undefined ? "" : String(text));
}

function unifiedRows(hunk) {
  const rows = [el("tr", { className: "hunk" }, el("td", { colSpan: 3 }, hunk.header))];
  for (const line of hunk.lines) {
    const kind = line.t === "+" ? "add" : line.t === "-" ? "del" : "ctx";
    rows.push(
      el(
        "tr",
        { className: kind },
        cell(line.old, "num"),
        cell(line.new, "num"),
        el("td", { className: "text" }, (line.t === "\\" ? "" : line.t) + line.text),
      ),
    );
  }
  return rows;
}

function splitRows(hunk) {
  const rows = [el("tr", { className: "hunk" }, el("td", { colSpan: 4 }, hunk.header))];
  let dels = [];
  let adds = [];
  const flush = () => {
    for (let i = 0; i < Math.max(dels.length, adds.length); i++) {
      const d = dels[i];
      const a = adds[i];
      rows.push(
        el(
          "tr",
          { className: "pair" },
          cell(d ? d.old : "", "num"),
          el("td", { className: "text " + (d ? "del" : "empty") }, d ? d.text : ""),
          cell(a ? a.new : "", "num"),
          el("td", { className: "text " + (a ? "add" : "empty") }, a ? a.text : ""),
        ),
      );
    }
    dels = [];
    adds = [];
  };
  for (const line of hunk.lines) {
    if (line.t === "-") dels.push(line);
    else if (line.t === "+") adds.push(line);
    else {
      flush();
      if (line.t === " ") {
        rows.push(
          el(
            "tr",
            { className: "ctx" },
            cell(line.old, "num"),
            el("td", { className: "text" }, line.text),
            cell(line.new, "num"),
            el("td", { className: "text" }, line.text),
          ),
        );
      }
    }
  }
  flush();
  return rows;
}

// A diff view with its own Unified / Side by side switch.  `layout` is shared by
// every diff on the page (an object the caller keeps), so the choice sticks.
export function diffView(patch, layout, changes) {
  const files = parsePatch(patch);
  const root = el("div", { className: "diff" });
  const draw = () => {
    root.replaceChildren();
    const toggle = el(
      "button",
      { type: "button", className: "diff-toggle", "aria-pressed": String(layout.split) },
      layout.split ? "Unified" : "Side by side",
    );
    toggle.addEventListener("click", () => {
      layout.split = !layout.split;
      draw();
    });
    // Only a diff that takes something away has two sides to show.
    if (files.some((f) => f.hunks.some((h) => h.lines.some((l) => l.t === "-")))) root.append(toggle);
    if (!files.length && changes) {
      for (const change of changes) {
        root.append(el("div", { className: "diff-file" }, `${change.operation || "change"} ${change.path || ""}`));
      }
    }
    for (const file of files) {
      const name = file.isNew ? `${file.path} (new file)` : file.isDeleted ? `${file.oldPath} (deleted)` : file.path;
      root.append(el("div", { className: "diff-file" }, name || "(file)"));
      // Side by side only where something is taken away (a new file has no left side).
      const split = layout.split && file.hunks.some((h) => h.lines.some((l) => l.t === "-"));
      const table = el("table", { className: split ? "diff-table split" : "diff-table" });
      const body = el("tbody");
      for (const hunk of file.hunks) body.append(...(split ? splitRows(hunk) : unifiedRows(hunk)));
      table.append(body);
      root.append(el("div", { className: "diff-scroll" }, table));
    }
  };
  draw();
  return root;
}

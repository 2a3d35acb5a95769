"""Tool-call content v1 can show: content blocks, diffs, display terminals (ACP-V2.md §8.2-§8.3).

- A v2 diff (structured ``changes`` plus an optional git patch) becomes v1
  ``{path, oldText, newText}`` per file the patch covers, from its hunks: the
  before/after excerpts (context and removed / context and added lines, in
  order; the whole file for an added one, whose ``oldText`` is omitted).
  Changes the patch does not cover (moves, copies, binary files, no patch) are
  a text block naming them, with the patch if there is one.
- A display terminal (v2: agent-owned, referenced by id; v1 terminals are
  client-owned ``terminal/*`` objects) becomes a text block: the command, the
  output (its last ``TERMINAL_TEXT_CHARS``) and how it ended.
- Content block types v1 lacks are left out.

Pure functions over wire dicts; ``translate`` decides when to send them.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = [
    "TERMINAL_TEXT_CHARS",
    "content_block",
    "diff_content",
    "parse_git_patch",
    "terminal_text",
]

#: A terminal's output is shown to v1 clients up to its last this many characters
#: (the whole text is re-sent on every output chunk: v1 cannot append).
TERMINAL_TEXT_CHARS = 20_000

V1_BLOCK_TYPES = frozenset({"text", "image", "audio", "resource_link", "resource"})
_HUNK = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@")

Update = dict[str, Any]


def content_block(raw: Any) -> Update | None:
    """A v2 ContentBlock (wire dict) as v1, or None for a type v1 lacks."""
    if not isinstance(raw, dict) or raw.get("type") not in V1_BLOCK_TYPES:
        return None
    return raw


def diff_content(item: Update) -> list[Update]:
    """A v2 diff as v1 diffs (one per file the patch covers) and a text block for the rest."""
    patch = item.get("patch") if isinstance(item.get("patch"), dict) else None
    files = parse_git_patch(patch["text"]) if patch and patch.get("format") == "git_patch" else {}
    out: list[Update] = []
    rest: list[str] = []
    for change in item.get("changes") or []:
        path = change.get("path")
        found = files.get(path) if change.get("operation") in ("add", "modify", "delete") else None
        if found is None:
            rest.append(_describe_change(change))
            continue
        old, new = found
        diff: Update = {"type": "diff", "path": path, "newText": new}
        if old is not None:
            diff["oldText"] = old
        out.append(diff)
    if rest or not out:
        text = "\n".join(rest) or "Files changed."
        if patch is not None and patch.get("text"):
            text += "\n\n" + _fenced(patch["text"], "diff")
        out.append({"type": "content", "content": {"type": "text", "text": text}})
    return out


def _describe_change(change: Update) -> str:
    operation = change.get("operation", "change")
    if change.get("oldPath"):
        return f"{operation}: {change['oldPath']} → {change.get('path')}"
    return f"{operation}: {change.get('path')}"


def parse_git_patch(text: str) -> dict[str, tuple[str | None, str]]:
    """Path → (old excerpt or None for a new file, new excerpt) for each text file.

    The excerpts are the hunks' lines (context and removed / context and added),
    in order: the whole file for an added one.  Paths come from the ``---`` /
    ``+++`` lines; a ``a/`` or ``b/`` prefix before an absolute path is dropped.
    """
    files: dict[str, tuple[str | None, str]] = {}
    old_path = new_path = None
    old: list[str] = []
    new: list[str] = []
    in_hunk = False
    last = ""

    def flush() -> None:
        path = new_path if new_path not in (None, "/dev/null") else old_path
        if path and path != "/dev/null" and (old or new or old_path == "/dev/null"):
            files[path] = (None if old_path == "/dev/null" else "".join(old), "".join(new))

    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git "):
            flush()
            old_path = new_path = None
            old, new, in_hunk = [], [], False
        elif not in_hunk and line.startswith("--- "):
            old_path = _patch_path(line[4:])
        elif not in_hunk and line.startswith("+++ "):
            new_path = _patch_path(line[4:])
        elif _HUNK.match(line):
            in_hunk = True
        elif in_hunk and line.startswith("\\"):
            for side, tag in ((old, "-"), (new, "+")):  # "\ No newline at end of file"
                if side and last in (" ", tag):
                    side[-1] = side[-1].removesuffix("\n")
        elif in_hunk and line[:1] in (" ", "-", "+"):
            last = line[0]
            body = line[1:]
            if last in (" ", "-"):
                old.append(body)
            if last in (" ", "+"):
                new.append(body)
        elif in_hunk and line in ("\n", ""):
            old.append("\n")
            new.append("\n")
    flush()
    return files


def _patch_path(raw: str) -> str:
    path = raw.rstrip("\n").split("\t")[0]
    if path[:2] in ("a/", "b/") and path[2:3] == "/":
        return path[2:]
    if path[:2] in ("a/", "b/") and not path.startswith("/"):
        return "/" + path[2:]
    return path


def terminal_text(terminal: Any) -> str:
    """A display terminal as Markdown: the command, its output, how it ended."""
    if terminal is None:
        return "(a terminal; no output yet)"
    command = terminal.fields.get("command")
    output = terminal.output.decode("utf-8", "replace")
    if len(output) > TERMINAL_TEXT_CHARS:
        output = "… (earlier output cut)\n" + output[-TERMINAL_TEXT_CHARS:]
    body = (f"$ {command}\n" if command else "") + output
    status = terminal.fields.get("exit_status")
    code = getattr(status, "exit_code", None)
    signal = getattr(status, "signal", None)
    if status is None:
        ending = "running"
    elif isinstance(code, int):
        ending = f"exit code {code}"
    elif isinstance(signal, str):
        ending = f"killed by {signal}"
    else:
        ending = "exited"
    return f"{_fenced(body, '')}\n{ending}"


def _fenced(text: str, language: str) -> str:
    """A Markdown code block whose fence is longer than any backtick run inside."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    if not text.endswith("\n"):
        text += "\n"
    return f"{fence}{language}\n{text}{fence}"

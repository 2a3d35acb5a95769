"""crow run's terminal permission question: Enter alone never allows; what the
question shows of what will happen (a diff cut after a few lines, a command and
its directory, a URL)."""

from __future__ import annotations

import asyncio
import io

from crow.acp import SessionProjection, schema
from crow.client.asking import PREVIEW_LINES, PermissionAsker, question_lines, what_it_does

OPTIONS = [
    {"optionId": "allow", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "reject", "name": "Reject", "kind": "reject_once"},
]


def request(**fields) -> schema.RequestPermissionRequest:
    return schema.RequestPermissionRequest.model_validate(
        {"sessionId": "s", "title": "Allow it?", "options": OPTIONS, **fields}
    )


def ask(typed: str) -> tuple[str | None, str]:
    out = io.StringIO()
    asker = PermissionAsker("ask", tty_in=io.StringIO(typed), tty_out=out)
    return asyncio.run(asker.ask(request())), out.getvalue()


def test_enter_alone_asks_again_until_an_answer():
    chosen, said = ask("\n\n2\n")
    assert chosen == "reject"
    assert said.count("choose 1-2: ") == 3 and "answer a number from 1 to 2" in said


def test_enter_then_end_of_input_cancels_rather_than_allows():
    assert ask("\n")[0] is None


def test_numbers_and_words_choose():
    assert ask("1\n")[0] == "allow" and ask("y\n")[0] == "allow" and ask("no\n")[0] == "reject"


def patch_of(lines: int) -> str:
    body = "".join(f"+line {n}\n" for n in range(lines))
    return (
        "diff --git /p/a.txt /p/a.txt\nnew file mode 100644\n--- /dev/null\n+++ /p/a.txt\n"
        f"@@ -0,0 +1,{lines} @@\n{body}"
    )


def test_a_write_shows_its_diff_cut_after_a_few_lines():
    diff = {
        "type": "diff",
        "changes": [{"operation": "add", "path": "/p/a.txt", "fileType": "text"}],
        "patch": {"format": "git_patch", "text": patch_of(20)},
    }
    call = {"toolCallId": "t", "title": "write a.txt", "kind": "edit", "content": [diff]}
    shown = what_it_does(request(subject={"type": "tool_call", "toolCall": call}))
    assert shown[0] == "/p/a.txt" and shown[1] == "(a new file)"
    assert shown[3] == "+line 0"
    assert len(shown) == PREVIEW_LINES + 2 and shown[-1] == f"… {20 + 2 - PREVIEW_LINES} more lines"


def test_a_short_diff_is_shown_whole():
    diff = {
        "type": "diff",
        "changes": [{"operation": "modify", "path": "/p/a.txt", "fileType": "text"}],
        "patch": {
            "format": "git_patch",
            "text": "diff --git /p/a.txt /p/a.txt\n--- /p/a.txt\n+++ /p/a.txt\n"
            "@@ -1,2 +1,2 @@\n a\n-b\n+B\n",
        },
    }
    call = {"toolCallId": "t", "kind": "edit", "content": [diff]}
    shown = what_it_does(request(subject={"type": "tool_call", "toolCall": call}))
    assert shown == ["/p/a.txt", "@@ -1,2 +1,2 @@", " a", "-b", "+B"]


def test_a_command_shows_itself_and_where_it_runs():
    subject = {"type": "command", "command": "rm -rf build", "cwd": "/p"}
    lines = question_lines(request(subject=subject, description="terminal wants to run"))
    assert lines == [
        "? Allow it?",
        "  terminal wants to run",
        "    $ rm -rf build",
        "    in /p",
        "  1) Allow once",
        "  2) Reject",
    ]


def test_a_fetch_shows_its_url_from_the_tool_call_seen_before():
    projection = SessionProjection("s")
    projection.apply(
        schema.ToolCallUpdateVariant.model_validate(
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": "t",
                "kind": "fetch",
                "rawInput": {"url": "https://example.org/x"},
            }
        )
    )
    subject = {"type": "tool_call", "toolCall": {"toolCallId": "t", "kind": "fetch"}}
    assert what_it_does(request(subject=subject), projection) == ["https://example.org/x"]

"""crow run's terminal permission question: Enter alone never allows."""

from __future__ import annotations

import io
from types import SimpleNamespace

from crow.client.asking import PermissionAsker

OPTIONS = [
    SimpleNamespace(option_id="allow", name="Allow once", kind="allow_once"),
    SimpleNamespace(option_id="reject", name="Reject", kind="reject_once"),
]


def ask(typed: str) -> tuple[str | None, str]:
    out = io.StringIO()
    asker = PermissionAsker("ask", tty_in=io.StringIO(typed), tty_out=out)
    return asker.ask("Run make?", OPTIONS), out.getvalue()


def test_enter_alone_asks_again_until_an_answer():
    chosen, said = ask("\n\n2\n")
    assert chosen == "reject"
    assert said.count("choose 1-2: ") == 3 and "answer a number from 1 to 2" in said


def test_enter_then_end_of_input_cancels_rather_than_allows():
    assert ask("\n")[0] is None


def test_numbers_and_words_choose():
    assert ask("1\n")[0] == "allow" and ask("y\n")[0] == "allow" and ask("no\n")[0] == "reject"

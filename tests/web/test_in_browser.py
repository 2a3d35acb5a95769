"""The web app in a real browser (the system's Chromium, headless, driven by Playwright)
against a real ``crow serve --http`` and the scripted model: one server for the module.

Each test opens the page as a person would (the URL crow serve prints, with its
token), drives it by keyboard and clicks, and reads what the page shows.  The main
views are saved as screenshots in ``$CROW_WEB_SCREENSHOTS`` (default: a folder in
pytest's temporary directory, printed).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crow_testing.fakemodel import Hang, ScriptedModel, Slow, Text, ToolCalls
from crow_testing.serve_support import HttpServer, write_config
from crow_testing.web_support import seed_session

pytest.importorskip("playwright")

CROW = [sys.executable, "-m", "crow"]
LONG_SESSION = "sess_seeded_long_0001"
LONG_UPDATES = 10_000
PASS = ToolCalls(calls=[("verdict", {"pass": True, "reasons": ["hello.txt holds hello"]})])
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
TIMEOUT_MS = 30_000  # generous: the suite runs on two shared cores


@dataclass(frozen=True)
class Served:
    """The module's ``crow serve --http``."""

    base: str  # http://127.0.0.1:PORT
    token: str
    acp_url: str  # for a line client: /acp with the token
    model: ScriptedModel
    home: Path


@pytest.fixture(scope="module")
def web(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """One server for the module, its store holding a long session from the start."""
    home = tmp_path_factory.mktemp("web") / "crow-home"
    home.mkdir(mode=0o700)
    with ScriptedModel() as model:
        memory = f'[memory]\nembedder = "openai"\nurl = "{model.base_url}"\n'  # its embeddings
        write_config(
            home, model.base_url, extra='[tools]\nbuiltin = ["fs", "terminal", "memory"]\n' + memory
        )
        seed_session(home / "crow.db", LONG_SESSION, "/tmp", LONG_UPDATES)
        env = {"CROW_HOME": str(home), "CROW_AGENTS_DIR": str(home / "agents")}
        server = HttpServer(env=env)
        try:
            base = server.bare_url.removesuffix("/acp")
            yield Served(base, server.token, server.url, model, home)
        finally:
            server.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ.get("CROW_WEB_SCREENSHOTS") or tmp_path_factory.mktemp("shots"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"screenshots in {folder}")
    return folder


#: Tests whose page logs errors on purpose (a refused connection is logged by Chromium).
NOISY = {"test_a_wrong_token_is_refused_with_a_clear_message"}


@pytest.fixture(autouse=True)
def page_without_errors(request: pytest.FixtureRequest) -> Iterator[None]:
    """Every test's page ran without an uncaught error or a console error (a
    Content-Security-Policy refusal is one)."""
    page = request.getfixturevalue("page") if "page" in request.fixturenames else None
    yield
    if page is not None and request.node.name not in NOISY:
        assert page.crow_errors == [], page.crow_errors


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A project folder with a short name (as the screenshots show it)."""
    with tempfile.TemporaryDirectory(prefix="project-") as folder:
        yield Path(folder)


def open_app(page: Any, web: Any, token: str | None = None) -> None:
    page.goto(f"{web.base}/#token={token or web.token}")
    page.wait_for_selector("#sessions-view:not([hidden])", timeout=TIMEOUT_MS)


def new_session(page: Any, cwd: Path, *, verify: bool = False) -> str:
    page.fill("#new-cwd", str(cwd))
    if verify:
        page.check("#new-verify")
    page.click("#new-session button[type=submit]")
    page.wait_for_selector("#session-view:not([hidden])", timeout=TIMEOUT_MS)
    found = re.search(r"#/s/([^/?#]+)", page.url)
    assert found, page.url
    session_id = found.group(1)
    page.wait_for_selector(
        f'body[data-opened="{session_id}"]', state="attached", timeout=TIMEOUT_MS
    )
    return session_id


def prompt(page: Any, text: str) -> None:
    page.fill("#prompt", text)
    page.press("#prompt", "Enter")


def wait_idle(page: Any) -> None:
    page.wait_for_selector("#session-state.state-idle", timeout=TIMEOUT_MS)


def history(page: Any) -> str:
    return str(page.inner_text("#history"))


def shown(page: Any, text: str) -> None:
    """Waits until the history shows ``text`` (a reply's text is also read out,
    from a hidden live region, before the history has it all)."""
    page.wait_for_selector(f"#history >> text={text}", timeout=TIMEOUT_MS)


def said(page: Any) -> list[str]:
    """The messages' texts as the page holds them (drawn or not: the history list
    draws only what is near the screen)."""
    return list(
        page.evaluate(
            """() => window.crowApp.session.current.entries
                .filter((entry) => entry.type === "message")
                .map((entry) => entry.content.map((block) => block.text || "").join(""))"""
        )
    )


# ---- the token --------------------------------------------------------------------------
def test_the_token_leaves_the_address_bar_and_only_session_storage_keeps_it(web, page):
    asked: list[str] = []
    page.on("request", lambda request: asked.append(request.url))
    open_app(page, web)
    assert "token" not in page.url and page.url.endswith("/#/")
    assert page.evaluate("sessionStorage.getItem('crow.token')") == web.token
    assert page.evaluate("localStorage.length") == 0
    # Every file from crow serve itself, none with the token (the fragment is not sent).
    assert asked and all(url.startswith(web.base + "/") for url in asked), asked
    assert all("token" not in url for url in asked if "/acp" not in url), asked
    page.go_back()  # the entry was replaced, not pushed: none before it holds the token
    assert page.url == "about:blank"
    page.goto(f"{web.base}/?token={web.token}")  # the query form, too
    page.wait_for_selector("#sessions-view:not([hidden])", timeout=TIMEOUT_MS)
    assert "token" not in page.url


def test_a_wrong_token_is_refused_with_a_clear_message(web, page):
    open_url = f"{web.base}/#token=not-the-token"
    page.goto(open_url)
    page.wait_for_selector("#login-view:not([hidden])", timeout=TIMEOUT_MS)
    assert "refused this token" in page.inner_text("#login-message")
    assert page.evaluate("sessionStorage.getItem('crow.token')") is None
    page.fill("#login-token", web.token)  # the right one, pasted: the list opens
    page.press("#login-token", "Enter")
    page.wait_for_selector("#sessions-view:not([hidden])", timeout=TIMEOUT_MS)


# ---- a turn -----------------------------------------------------------------------------
def test_a_turn_streams_asks_permission_in_the_page_and_gets_a_verdict(web, page, workdir, shots):
    open_app(page, web)
    session_id = new_session(page, workdir, verify=True)
    target = workdir / "hello.txt"
    web.model.script(
        ToolCalls(calls=[("fs__write", {"path": str(target), "content": "hello\n"})]),
        Slow("Wrote **hello.txt** as asked.\n\n```python\nprint('hello')\n```", 6, 0.25),
        PASS,
    )
    page.fill("#prompt", "write")
    page.press("#prompt", "Shift+Enter")  # a new line, not a send
    page.type("#prompt", "hello.txt")
    assert page.input_value("#prompt") == "write\nhello.txt"
    page.press("#prompt", "Enter")
    ask = page.wait_for_selector(".ask", timeout=TIMEOUT_MS)
    assert "Allow Write" in ask.inner_text() and "(new file)" in ask.inner_text()
    assert page.inner_text(".ask .diff tr.add td.text") == "+hello"  # what will be written
    assert page.get_attribute("#session-state", "class") == "badge state-requires_action"
    page.screenshot(path=str(shots / "permission.png"))
    assert page.evaluate("document.activeElement.textContent") == "Allow once"  # focused
    page.keyboard.press("Enter")
    # The reply streams: part of it shows before the whole.
    page.wait_for_selector(".entry.agent", timeout=TIMEOUT_MS)
    partial = page.inner_text(".entry.agent")
    assert "print('hello')" not in partial, partial
    page.wait_for_selector(".entry.agent .hljs", timeout=TIMEOUT_MS)
    page.wait_for_selector(".verdict .badge.verdict-pass", timeout=TIMEOUT_MS)
    assert target.read_text() == "hello\n"
    shown = history(page)
    assert page.inner_text(".entry.user") == "You\n\nwrite\nhello.txt"
    assert "Wrote hello.txt as asked." in shown and "hello.txt holds hello" in shown
    assert "turn ended" in shown
    # An edit: its question and its diff side by side (the page is wide), then unified.
    web.model.script(
        ToolCalls(
            calls=[("fs__edit", {"path": str(target), "old_text": "hello", "new_text": "hi"})]
        ),
        Text(text="Edited."),
        PASS,
    )
    prompt(page, "say hi instead")
    page.wait_for_selector(".ask .diff td.del", timeout=TIMEOUT_MS)
    assert page.inner_text(".ask .diff td.del") == "hello"
    assert page.inner_text(".ask .diff td.add") == "hi"
    page.click(".ask button:text('Allow once')")
    page.wait_for_selector(".verdict >> nth=1", timeout=TIMEOUT_MS)
    assert target.read_text() == "hi\n"
    edit = page.locator(".entry.tool").nth(1)  # the write, then the edit
    assert edit.locator(".diff td.del").inner_text() == "hello"
    edit.locator(".diff-toggle").click()  # to unified
    assert edit.locator(".diff tr.del td.text").inner_text() == "-hello"
    assert edit.locator(".diff tr.add td.text").inner_text() == "+hi"
    page.screenshot(path=str(shots / "session.png"))
    # Reloaded: the same history, replayed, once.
    page.reload()
    page.wait_for_selector(f'body[data-opened="{session_id}"]', state="attached")
    page.wait_for_selector(".verdict .badge.verdict-pass", timeout=TIMEOUT_MS)
    again = history(page)
    assert again.count("Wrote hello.txt as asked.") == 1 and again.count("write\nhello.txt") == 1
    assert "Write " + str(target) in again
    # The list shows its state and its last verdict.
    page.click("a.back")
    row = page.wait_for_selector(f'li.session-row:has(a[href="#/s/{session_id}"])')
    assert row is not None and "idle" in row.inner_text()
    page.wait_for_selector(f'li.session-row:has(a[href="#/s/{session_id}"]) .verdict-pass')
    page.screenshot(path=str(shots / "sessions.png"))


def test_a_command_is_asked_with_its_folder_and_its_output_shown(web, page, workdir):
    open_app(page, web)
    new_session(page, workdir)
    web.model.script(
        ToolCalls(calls=[("terminal__run", {"command": "printf 'one\\ntwo\\n'"})]),
        Text(text="It printed two lines."),
    )
    prompt(page, "run it")
    ask = page.wait_for_selector(".ask", timeout=TIMEOUT_MS)
    assert "$ printf 'one\\ntwo\\n'" in ask.inner_text()  # what will be run, and where
    assert f"in {workdir}" in ask.inner_text()
    page.click(".ask button:text('Allow once')")
    shown(page, "It printed two lines.")
    wait_idle(page)
    page.wait_for_selector(".entry.tool .status-completed", timeout=TIMEOUT_MS)
    terminal = page.locator(".entry.tool .terminal")  # in the finished call's fold
    assert "exited 0" in str(terminal.text_content())
    assert terminal.locator("pre.output").text_content() == "one\ntwo\n"


def test_a_slow_turn_is_cancelled_from_the_page(web, page, workdir):
    open_app(page, web)
    new_session(page, workdir)
    web.model.script(Hang())
    prompt(page, "wait forever")
    page.wait_for_selector("#cancel:not([hidden])", timeout=TIMEOUT_MS)
    page.click("#cancel")
    page.wait_for_selector(".turn-end.stop-other", timeout=TIMEOUT_MS)
    assert "turn cancelled" in history(page)
    wait_idle(page)


def test_what_the_model_and_tools_write_is_shown_as_text(web, page, workdir):
    (workdir / "evil.html").write_text(XSS)
    open_app(page, web)
    new_session(page, workdir)
    web.model.script(
        ToolCalls(calls=[("fs__read", {"path": str(workdir / "evil.html")})]),
        Text(text=f"Here it is: {XSS}\n\n[a link](javascript:window.__xss=3)"),
    )
    prompt(page, XSS)
    page.wait_for_selector(".entry.agent", timeout=TIMEOUT_MS)
    wait_idle(page)
    page.wait_for_selector(".entry.tool .status-completed", timeout=TIMEOUT_MS)
    shown = str(page.text_content("#history"))  # folded parts too
    assert shown.count("<script>window.__xss = 1</script>") >= 3, shown  # prompt, tool, reply
    assert page.evaluate("window.__xss") is None
    active = "#history script, #history img, #history [onerror], #history a[href^='javascript']"
    assert page.eval_on_selector_all(active, "n => n.length") == 0


def test_a_text_file_is_attached_and_a_prompt_sent_while_busy_waits_in_the_queue(
    web, page, workdir
):
    notes = workdir / "notes.txt"
    notes.write_text("the port is 8765\n")
    open_app(page, web)
    new_session(page, workdir)
    web.model.script(Slow("still thinking", 4, 0.5), Text(text="noted"))
    page.set_input_files("#attach", str(notes))
    page.wait_for_selector("#attachments .chip:has-text('notes.txt')")
    prompt(page, "read the notes")
    page.wait_for_selector("#session-state.state-running", timeout=TIMEOUT_MS)
    prompt(page, "and then this")  # held until the turn ends
    page.wait_for_selector("#queue:not([hidden]) li:has-text('and then this')", timeout=TIMEOUT_MS)
    shown(page, "noted")
    wait_idle(page)
    assert page.is_hidden("#queue")
    first = web.model.requests[-2]["messages"][-1]["content"]
    assert "the port is 8765" in str(first)  # the file went with the prompt
    assert page.locator(".entry.user").count() == 2
    assert "attached: notes.txt" in page.inner_text(".entry.user")  # folded, with its text
    assert "the port is 8765" in str(page.locator(".entry.user").first.text_content())


# ---- several clients --------------------------------------------------------------------
def test_a_second_client_prompts_while_the_page_watches(web, page, workdir):
    open_app(page, web)
    session_id = new_session(page, workdir)
    web.model.script(Text(text="answered in the terminal"))
    attach = ["--url", web.acp_url, "--session", session_id, "--cwd", str(workdir)]
    ran = subprocess.run(
        [*CROW, "run", *attach, "asked from the terminal"],
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
    )
    assert ran.returncode == 0, ran.stderr
    page.wait_for_selector(".entry.agent", timeout=TIMEOUT_MS)
    shown = history(page)
    assert "asked from the terminal" in shown and "answered in the terminal" in shown
    label = page.inner_text(".entry.user .who")
    assert label == "From crow", label  # the line client's clientInfo name


def test_a_reconnect_goes_on_from_its_cursor_without_duplicates(web, page, workdir):
    open_app(page, web)
    new_session(page, workdir)
    web.model.script(Text(text="first answer"))
    prompt(page, "first")
    page.wait_for_selector(".entry.agent", timeout=TIMEOUT_MS)
    wait_idle(page)
    page.evaluate("window.crowApp.rpc.ws.close()")
    page.wait_for_selector(".connection.bad", timeout=TIMEOUT_MS)
    page.wait_for_selector(".connection.good", timeout=TIMEOUT_MS)
    web.model.script(Text(text="second answer"))
    prompt(page, "second")
    shown(page, "second answer")
    wait_idle(page)
    assert said(page) == ["first", "first answer", "second", "second answer"]
    # Back to the list and in again: the same history (replayed), and on from there.
    session_url = page.url
    page.click("a.back")
    page.wait_for_selector(".session-row", timeout=TIMEOUT_MS)
    page.goto(session_url)
    shown(page, "second answer")
    web.model.script(Text(text="third answer"))
    prompt(page, "third")
    shown(page, "third answer")
    wait_idle(page)
    turns = ["first", "first answer", "second", "second answer", "third", "third answer"]
    assert said(page) == turns
    assert page.eval_on_selector_all(".entry.user", "n => n.length") == 3  # all drawn
    assert history(page).count("third answer") == 1


#: The history of a session opened again comes in bulk over HTTP, or, where HTTP fails
#: (a proxy that passes only the WebSocket), over the WebSocket after the live turn.
HISTORY_WAYS = {
    "over HTTP": ("session/resume", lambda held: held.continue_()),
    "over the WebSocket": ("initialize", lambda held: held.abort()),
}


@pytest.mark.parametrize("way", HISTORY_WAYS)
def test_a_prompt_sent_while_the_session_opens_keeps_its_whole_history(web, page, workdir, way):
    """Back in a session and prompting at once: the WebSocket, which still watches the
    session, brings the new turn while the history is still on its way.  The page shows
    the whole history, once (the turn's updates, logged after the history's, must not
    make the page drop those as seen), and in order."""
    method, let_go = HISTORY_WAYS[way]
    sockets: list[Any] = []
    page.on("websocket", lambda socket: sockets.append(socket))
    open_app(page, web)
    new_session(page, workdir)
    web.model.script(Text(text="first answer"))
    prompt(page, "first")
    shown(page, "first answer")
    wait_idle(page)
    session_url = page.url
    page.click("a.back")
    page.wait_for_selector(".session-row", timeout=TIMEOUT_MS)
    held: list[Any] = []  # the history's request over HTTP, held back
    asks = f'"method":"{method}"'

    def hold_the_history(route: Any) -> None:
        if asks in (route.request.post_data or ""):
            held.append(route)
        else:
            route.continue_()

    page.route(f"{web.base}/acp", hold_the_history)
    with page.expect_request(lambda asked: asks in (asked.post_data or "")):
        page.goto(session_url)
    web.model.script(Text(text="second answer"))
    turn_ended = '"stopReason":"end_turn"'
    with sockets[-1].expect_event("framereceived", lambda frame: turn_ended in frame):
        prompt(page, "second")
    assert len(held) == 1
    let_go(held[0])
    shown(page, "second answer")
    wait_idle(page)
    assert said(page) == ["first", "first answer", "second", "second answer"]
    assert page.eval_on_selector_all(".entry.user", "n => n.length") == 2  # all drawn
    if way == "over the WebSocket":  # Chromium logs the refused request, as it should
        page.crow_errors.remove("Failed to load resource: net::ERR_FAILED")


# ---- managing sessions ------------------------------------------------------------------
def test_rename_by_title_and_delete_after_confirming(web, page, workdir):
    open_app(page, web)
    session_id = new_session(page, workdir)
    page.click("#rename")
    page.fill("#rename-input", "a better name")
    page.click("#rename-ok")
    page.wait_for_selector("#session-title:text('a better name')", timeout=TIMEOUT_MS)
    page.click("#delete-session")
    page.click("#confirm-dialog button[value=cancel]")  # kept
    assert page.url.endswith(session_id)
    page.click("#delete-session")
    page.click("#confirm-ok")
    page.wait_for_selector("#sessions-view:not([hidden])", timeout=TIMEOUT_MS)
    page.wait_for_selector("#list-message:not(:text('loading…'))")
    assert page.query_selector(f'a[href="#/s/{session_id}"]') is None
    page.fill("#search", "a long session")  # the search filters the list
    assert page.eval_on_selector_all(".session-row", "n => n.length") == 1


def test_settings_show_the_model_and_turn_verify_off(web, page, workdir):
    open_app(page, web)
    new_session(page, workdir, verify=True)
    page.click("#open-settings")
    assert page.input_value("#config-model") == "main"
    page.uncheck("#verify-on")
    page.click("#verify-form button[type=submit]")
    page.wait_for_selector("#verify-message:text('Verify is off.')", timeout=TIMEOUT_MS)
    web.model.script(Text(text="not judged"))
    prompt(page, "hi")
    shown(page, "not judged")
    wait_idle(page)
    assert page.query_selector(".verdict") is None and page.query_selector(".judging") is None


def test_the_memory_panel_adds_finds_and_forgets(web, page, workdir):
    open_app(page, web)
    new_session(page, workdir)
    page.click("#open-memory")
    page.fill("#memory-text", "the build runs with make check")
    page.select_option("#memory-scope", "project")
    page.click("#memory-add button[type=submit]")
    page.wait_for_selector("#memory-message:text('Remembered.')", timeout=TIMEOUT_MS)
    # Recalled into the next turn by itself: shown as what the model was given.
    web.model.script(Text(text="Run make check."))
    prompt(page, "how does the build run? make check?")
    page.wait_for_selector(
        ".recalled:has-text('the build runs with make check')", timeout=TIMEOUT_MS
    )
    wait_idle(page)
    page.fill("#memory-query", "build")
    page.press("#memory-query", "Enter")
    page.wait_for_selector("#memory-list li:has-text('make check')", timeout=TIMEOUT_MS)
    page.click("#memory-list li:has-text('make check') button")
    page.wait_for_selector("#memory-message:text('Forgotten.')", timeout=TIMEOUT_MS)
    page.wait_for_selector("#memory-list li:has-text('make check')", state="detached")


# ---- a long session; phone width --------------------------------------------------------
def test_a_long_session_opens_with_only_what_is_on_screen_drawn(web, page, shots):
    open_app(page, web)
    page.goto(f"{web.base}/#/s/{LONG_SESSION}")
    page.wait_for_selector(f'body[data-opened="{LONG_SESSION}"]', state="attached", timeout=60_000)
    turns = LONG_UPDATES // 5
    shown(page, f"Answer {turns - 1}:")
    timings = page.evaluate("window.crowTimings")
    print(f"opened a {LONG_UPDATES}-update session in {timings['openMs']:.0f} ms")
    assert timings["over"] == "http"  # the history in bulk, then live over the WebSocket
    assert timings["entries"] >= turns * 4  # prompt, thought, tool call, reply (and ends)
    assert page.eval_on_selector_all("#history [data-key]", "n => n.length") < 120
    page.eval_on_selector("#history", "h => { h.scrollTop = 0; }")
    shown(page, "question number 0")
    assert page.eval_on_selector_all("#history [data-key]", "n => n.length") < 120


def test_phone_width_in_the_dark(web, browser, shots, workdir):
    context = browser.new_context(
        viewport={"width": 390, "height": 844}, color_scheme="dark", device_scale_factor=2
    )
    page = context.new_page()
    try:
        open_app(page, web)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        new_session(page, workdir)
        web.model.script(
            Text(text="A plan:\n\n1. read the code\n2. fix `parse()`\n\n```js\nconst x = 1;\n```")
        )
        prompt(page, "plan it")
        page.wait_for_selector(".entry.agent .hljs", timeout=TIMEOUT_MS)
        wait_idle(page)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390
        background = page.evaluate("getComputedStyle(document.body).backgroundColor")
        assert background == "rgb(21, 22, 24)", background
        page.screenshot(path=str(shots / "phone-dark.png"))
    finally:
        context.close()

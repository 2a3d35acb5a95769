"""The web app's tests: a real ``crow serve --http`` and a real browser.

The browser is Debian's chromium (``/usr/bin/chromium``, installed by ``.ci/run``),
driven by Playwright for Python; Playwright's own browsers are never downloaded.
Without chromium these tests are skipped, unless ``CROW_REQUIRE_BROWSER=1`` (set by
``.ci/run``), where they fail.

- ``browser``: one headless Chromium per test process.
- ``web``: a ``crow serve --http`` on the scripted model, with the app's URL.
- ``page``: a fresh browser context (no storage shared between tests) and its
  page; ``page.crow_errors`` collects the page's uncaught errors and console
  errors (a Content-Security-Policy refusal is one), for tests to assert on.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crow_testing.fakemodel import ScriptedModel
from crow_testing.serve_support import HttpServer, write_config

CHROMIUM = os.environ.get("CROW_CHROMIUM", "/usr/bin/chromium")

#: Headless, and nothing that reaches out: this machine's network is closed, and a
#: test must not depend on (or wait for) Google's hosts.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class WebCrow:
    """A running ``crow serve --http`` and where its web app is."""

    server: HttpServer
    home: Path

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return self.server.bare_url.removesuffix("/acp")

    @property
    def token(self) -> str:
        return self.server.token

    @property
    def app_url(self) -> str:
        """The URL ``crow serve`` prints for the app: the token in the fragment."""
        return f"{self.base}/#token={self.token}"


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    if not (Path(CHROMIUM).exists() or shutil.which("chromium")):
        if os.environ.get("CROW_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CROW_REQUIRE_BROWSER=1 but there is no {CHROMIUM}")
        pytest.skip("no chromium: apt-get install chromium (bash .ci/run does)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(
            executable_path=CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium"),
            args=CHROMIUM_ARGS,
        )
        yield launched
        launched.close()


@pytest.fixture
def web(crow_home: Path, scripted_model: ScriptedModel) -> Iterator[WebCrow]:
    write_config(crow_home, scripted_model.base_url)
    server = HttpServer()
    yield WebCrow(server, crow_home)
    server.stop()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    opened = context.new_page()
    errors: list[str] = []
    opened.on("pageerror", lambda error: errors.append(f"uncaught: {error}"))
    opened.on(
        "console", lambda message: errors.append(message.text) if message.type == "error" else None
    )
    opened.crow_errors = errors
    yield opened
    context.close()

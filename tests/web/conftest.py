"""The web app's tests: a real browser against a real ``crow serve --http``.

The browser is Debian's chromium (``/usr/bin/chromium``, installed by ``.ci/run``),
driven by Playwright for Python; Playwright's own browsers are never downloaded.
Without chromium these tests are skipped, unless ``CROW_REQUIRE_BROWSER=1`` (set by
``.ci/run``), where they fail.

- ``browser``: one headless Chromium per test module.  Playwright's sync API runs an
  asyncio loop in this thread while it is open, so it must not outlive the module:
  an async test of another file after it in the same process (xdist hands a worker
  tests of every file) could not run its own loop.
- ``page``: a fresh browser context (no storage shared between tests) and its
  page; ``page.crow_errors`` collects the page's uncaught errors and console
  errors (a Content-Security-Policy refusal is one), for tests to assert on.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from crow_testing.web_support import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CROW_REQUIRE_BROWSER") == "1":
            pytest.fail(f"CROW_REQUIRE_BROWSER=1 but there is no {CHROMIUM}")
        pytest.skip("no chromium: apt-get install chromium (bash .ci/run does)")
    pytest.importorskip("playwright")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


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

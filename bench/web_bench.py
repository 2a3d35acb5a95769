"""The web app on loopback, in the system's Chromium (headless, Playwright):

    python bench/web_bench.py [--updates 10000] [--rounds 5]

Starts ``crow serve --http`` on a fresh home whose store holds one session of N
updates (crow_testing.web_support), then, each round in a fresh browser context:

- first paint: from navigation to the first contentful paint of ``/#token=...``,
  and to the sessions list drawn (connected, listed);
- open: from asking for the long session to its last reply on screen, and the
  replay alone as the page timed it (over HTTP in bulk, then the WebSocket's
  resume from there: crow/serve/webapp/js/replay.js);
- scroll: the page scrolled from the bottom to the top in 60 steps, one per frame:
  the median and worst frame time, and how many history rows the DOM held.

Prints the median, min and max of each.  Targets (issue #35): the app loads in under
300 ms, a 10,000-update session opens in under 1 s and scrolls smoothly.  No model
is called.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "src"), str(ROOT / "testing")]

from crow_testing.serve_support import HttpServer, write_config  # noqa: E402
from crow_testing.web_support import CHROMIUM, CHROMIUM_ARGS, seed_session  # noqa: E402

SESSION = "sess_web_bench_long"

SCROLL = """async () => {
  const h = document.getElementById("history");
  const frame = () => new Promise((r) => requestAnimationFrame(r));
  await frame();
  const steps = 60, times = [];
  const start = h.scrollTop;
  let last = performance.now();
  for (let i = 1; i <= steps; i++) {
    h.scrollTop = start * (1 - i / steps);
    await frame();
    const now = performance.now();
    times.push(now - last);
    last = now;
  }
  return {times, rows: document.querySelectorAll("#history [data-key]").length};
}"""


def summary(name: str, values: list[float], unit: str = "ms") -> str:
    return (
        f"{name:<34} median {statistics.median(values):8.1f} {unit}"
        f"   min {min(values):8.1f}   max {max(values):8.1f}"
    )


def main() -> None:
    from playwright.sync_api import sync_playwright

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir(mode=0o700)
        write_config(home, "http://127.0.0.1:9/v1")  # never asked: nothing is prompted
        turns = seed_session(home / "crow.db", SESSION, "/tmp", options.updates)
        server = HttpServer(
            env={
                "CROW_HOME": str(home),
                "CROW_AGENTS_DIR": str(home / "agents"),
                "PYTHONPATH": str(ROOT / "src"),
            }
        )
        base = server.bare_url.removesuffix("/acp")
        paint, listed, opened, resumed, frames, worst, rows = [], [], [], [], [], [], []
        try:
            with sync_playwright() as playwright:
                browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                for _ in range(options.rounds):
                    context = browser.new_context(viewport={"width": 1200, "height": 800})
                    page = context.new_page()
                    started = time.perf_counter()
                    page.goto(f"{base}/#token={server.token}")
                    page.wait_for_selector("#sessions-view:not([hidden])")
                    listed.append((time.perf_counter() - started) * 1000)
                    paint.append(
                        page.evaluate(
                            "performance.getEntriesByName('first-contentful-paint')[0].startTime"
                        )
                    )
                    started = time.perf_counter()
                    page.evaluate(f"location.hash = '#/s/{SESSION}'")
                    page.wait_for_selector(f'body[data-opened="{SESSION}"]', state="attached")
                    page.wait_for_selector(f"text=Answer {turns - 1}:")
                    opened.append((time.perf_counter() - started) * 1000)
                    resumed.append(page.evaluate("window.crowTimings.openMs"))
                    scrolled = page.evaluate(SCROLL)
                    frames.append(statistics.median(scrolled["times"]))
                    worst.append(max(scrolled["times"]))
                    rows.append(scrolled["rows"])
                    context.close()
                browser.close()
        finally:
            server.stop()
    print(f"web app, {options.updates} updates ({turns} turns), {options.rounds} rounds")
    print(summary("first contentful paint", paint))
    print(summary("sessions list shown", listed))
    print(summary("long session open (to last reply)", opened))
    print(summary("  of which the replay (as timed)", resumed))
    print(summary("scroll: median frame", frames))
    print(summary("scroll: worst frame", worst))
    print(f"{'history rows in the DOM':<34} at most {max(rows)}")


if __name__ == "__main__":
    main()

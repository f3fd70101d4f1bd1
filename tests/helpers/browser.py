"""Driving Debian's Chromium through Playwright for the page tests (no `playwright install`): the
launch, and a page that can reach nothing but file: URLs."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (/usr/bin/chromium)"
)


@contextmanager
def chromium() -> Iterator:
    """A launched browser, or a skip when Chromium or Playwright is missing."""
    if not CHROMIUM.exists():
        pytest.skip("Debian's chromium is not installed (/usr/bin/chromium)")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright")
    with sync_api.sync_playwright() as pw:
        launched = pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            yield launched
        finally:
            launched.close()


def open_offline(browser, path: Path, width: int = 1400, height: int = 900, **context):
    """A page on ``path`` with every non-file request aborted; returns (page, errors, blocked)."""
    page = browser.new_page(viewport={"width": width, "height": height}, **context)
    errors: list[str] = []
    blocked: list[str] = []
    page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    def route(r) -> None:
        if r.request.url.startswith("file:"):
            r.continue_()
        else:
            blocked.append(r.request.url)
            r.abort()

    page.route("**/*", route)
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, errors, blocked

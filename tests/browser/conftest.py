"""Browser tests: Playwright driving Debian's Chromium (``/usr/bin/chromium``, installed by
``.ci/run``; Playwright's own browser downloads are not used). In CI they must run: a missing
Chromium fails there, and is a stated skip only on a developer's machine. Screenshots of the
main pages go to ``test-artifacts/dashboard/``."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.processes import ROOT

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@pytest.fixture(scope="module")
def chromium() -> Iterator[object]:
    """One browser per test module: Playwright's sync API keeps an event loop running while it
    is open, which would break later tests that call ``asyncio.run``."""
    if not Path(CHROMIUM).exists():
        reason = f"{CHROMIUM} is missing (apt-get install chromium; .ci/run installs it)"
        if os.environ.get("CI"):
            pytest.fail(f"browser tests must run in CI: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture(scope="session")
def artifacts() -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    return ARTIFACTS

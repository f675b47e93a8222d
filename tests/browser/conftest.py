"""The web chat in a real browser: Debian's Chromium driven by Playwright (never
`playwright install`: it downloads a browser), a fresh profile per test, the gateway over
real HTTP with the scripted model. A failing test saves a screenshot under
.cache/screenshots/ (every test does with BROWSER_SCREENSHOTS=all)."""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from playwright.async_api import Browser, ConsoleMessage, Page, async_playwright

from tests.integration.conftest import (
    GatewayFactory,
    Harness,
    make_gateway,  # noqa: F401 - the gateway fixture
)

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / ".cache" / "screenshots"
CHROMIUM = os.environ.get("BROWSER_CHROMIUM", "/usr/bin/chromium")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
#: Room for a loaded machine: each expectation polls until it holds, for up to this long.
EXPECT_MS = 20_000


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Iterator[None]:
    report = yield
    setattr(item, f"report_{report.when}", report)  # type: ignore[attr-defined]
    return report


@pytest.fixture
async def browser() -> AsyncIterator[Browser]:
    """Chromium with a fresh, empty profile (Playwright makes a new one per launch)."""
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: `apt-get install chromium` (.ci/run does)")
    async with async_playwright() as pw:
        launched = await pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS,
                                            headless=True, timeout=60_000)
        try:
            yield launched
        finally:
            await launched.close()


@dataclass
class Chat:
    """The web chat page of a running gateway, and what the browser logged."""

    page: Page
    harness: Harness
    url: str
    errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)

    async def send(self, text: str) -> None:
        box = self.page.get_by_label("Message")
        await box.fill(text)
        await box.press("Enter")

    def bubbles(self, kind: str) -> Any:
        return self.page.locator(f"#log .msg.{kind}")


@pytest.fixture
async def chat(request: pytest.FixtureRequest, browser: Browser,
               make_gateway: GatewayFactory) -> AsyncIterator[Any]:  # noqa: F811
    """``await chat(**gateway_settings)``: a gateway and a page showing its web chat."""
    made: list[Chat] = []

    async def open_chat(*, width: int = 1100, height: int = 800, **overrides: Any) -> Chat:
        h = await make_gateway(**overrides)
        context = await browser.new_context(viewport={"width": width, "height": height})
        context.set_default_timeout(EXPECT_MS)
        page = await context.new_page()
        chat = Chat(page, h, str(h.client.make_url("/")))

        def console(msg: ConsoleMessage) -> None:
            if msg.type == "error":
                chat.errors.append(msg.text)

        page.on("console", console)
        page.on("pageerror", lambda exc: chat.errors.append(f"page error: {exc}"))
        page.on("request", lambda req: chat.requests.append(req.url))
        made.append(chat)
        await page.goto(chat.url)
        await page.locator("html[data-ready=true]").wait_for(state="attached")
        return chat

    yield open_chat
    report = getattr(request.node, "report_call", None)
    keep = (report is not None and report.failed) or os.environ.get("BROWSER_SCREENSHOTS") == "all"
    for i, c in enumerate(made):
        if keep:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^A-Za-z0-9_.-]+", "_", request.node.name)
            path = SCREENSHOTS / f"{name}-{i}.png"
            await c.page.screenshot(path=str(path), full_page=True)
            print(f"screenshot of the page: {path}")
        await c.page.context.close()

"""What the console's real-browser tests share: Debian's headless chromium through
Playwright, a page that fails its test on any script error, console error or failed request,
and signing in."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Page, Request, expect, sync_playwright

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    """One headless chromium (Debian's; never a downloaded one)."""
    assert os.access(CHROMIUM, os.X_OK), "needs Debian's chromium: `make servers` installs it"
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture(name="browser", scope="module")
def module_browser() -> Iterator[Browser]:
    """One headless chromium for a test module's pages."""
    with chromium() as b:
        yield b


@contextmanager
def signed_in(
    browser: Browser, url: str, token: str, *, javascript: bool = True, width: int = 1400
) -> Iterator[Page]:
    """A fresh page of the console at `url`, signed in with `token`, in a window `width`
    pixels wide (with the page's script switched off unless `javascript`); the test fails on
    any error the page logged (`watch_errors`)."""
    context = browser.new_context(
        base_url=url, viewport={"width": width, "height": 900}, java_script_enabled=javascript
    )
    context.set_default_timeout(10_000)
    pg = context.new_page()
    pg.on("dialog", lambda dialog: dialog.accept())  # confirm() and leave-page prompts
    errors = watch_errors(pg)
    sign_in(pg, token)
    yield pg
    context.close()
    assert not errors, errors  # no script or console error, no failed request


def watch_errors(page: Page) -> list[str]:
    """Every script error, console error (a CSP violation, an invalid `pattern`…) and failed
    request of the page, as the test's failures. Pages the story answers with an error status
    on purpose (a 401 for a wrong token, a 409 conflict, a 422 refusal) make the browser log
    that status; those are the page's answer, not a failure, and are left out."""
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(f"script error: {exc}"))

    def console(msg: ConsoleMessage) -> None:
        answered = re.fullmatch(
            r"Failed to load resource: the server responded with a status of (401|409|422) .*",
            msg.text,
        )
        if msg.type == "error" and not answered:
            errors.append(f"console error: {msg.text} at {msg.location.get('url')}")

    def failed(request: Request) -> None:
        # ERR_ABORTED is the browser cancelling a request itself: a page left while its
        # favicon or live stream loads, a navigation that became a download (/raw/, /zip).
        # Faults of the server or the network have other codes (ERR_EMPTY_RESPONSE, ...).
        if request.failure != "net::ERR_ABORTED":
            errors.append(f"request failed: {request.url} {request.failure}")

    page.on("console", console)
    page.on("requestfailed", failed)
    return errors


def sign_in(page: Page, token: str) -> None:
    page.goto("/")
    expect(page).to_have_url("/login?next=/")
    page.fill("#token", token)
    page.click("button[type=submit]")
    expect(page.locator("h1")).to_have_text("Agents")


def editor_text(page: Page) -> str:
    """The editor's text: the form's textarea, which the editor keeps equal to what it shows."""
    value: str = page.input_value("#content")
    return value


def set_editor(page: Page, text: str) -> None:
    """Replace the editor's text as typing would (the page validates on each change): through
    the CodeMirror editor, or in the textarea of a page without scripts. The page's scripts
    run after its HTML is parsed: until they did (the console's `skillfsEditor` is set, to
    null where no editor could be drawn) the textarea may be hidden with no editor yet."""
    page.wait_for_function(
        "() => window.skillfsEditor !== undefined || document.readyState === 'complete'"
    )
    if page.evaluate("() => Boolean(window.skillfsEditor)"):
        page.evaluate("text => window.skillfsEditor.set(text)", text)
    else:
        page.fill("#content", text)

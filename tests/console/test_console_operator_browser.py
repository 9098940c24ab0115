"""The operator's console in Debian's chromium (issue 30, "What it must show"): a message
typed on every kind of write is on the Activity and History pages; New skill refuses the
template's placeholder text and lands a draft in the review queue; the editor gives the text
most of the window and its toolbar one line; and no page logs an error or a failed request.

One browser and one console (SQLite) for the module, as tests/console/test_console_browser.py.
"""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import Browser, Locator, Page, expect

import skillfs
from skillfs.console import ConsoleServer
from skillfs.model import Rollout
from tests.browser_helpers import (  # noqa: F401  (module_browser: a fixture)
    editor_text,
    module_browser,
    set_editor,
    signed_in,
)
from tests.console.operator_console import (  # noqa: F401  (operator_*: fixtures)
    AGENT,
    ALICE,
    OPERATOR,
    SHARED,
    TOKEN,
    operator_console,
    operator_page,
    operator_store,
)


def _new_skill(page: Page, name: str, description: str, instructions: str | None) -> None:
    """Open New skill on the shared scope and fill it (the template's text left as it is when
    `instructions` is None)."""
    page.goto(f"/{SHARED.prefix}")
    page.click("button[data-toggle='new-skill']")
    page.fill("#new-name", name)
    page.fill("#new-description", description)
    if instructions is not None:
        page.fill("#new-instructions", instructions)


def test_a_message_on_every_write_is_on_activity_and_history(
    page: Page, store: skillfs.Store
) -> None:
    """New skill, save, roll back, rename and delete, each with its own message: the History
    page shows each with the operator (By) and the message (Why), and so does Activity."""
    _new_skill(page, "greeting-policy", "How to greet customers.", "1. Say hello.\n")
    page.fill("#new-why", "msg: new skill")
    page.click("#create-live")
    expect(page.locator(".flash.ok")).to_contain_text("Created greeting-policy")
    set_editor(page, editor_text(page).replace("Say hello.", "Say a warm hello."))
    page.fill("#save-why", "msg: warmer")
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text("is now version 2")
    page.click("a.btn >> text=History")
    page.fill("#rollback-why-1", "msg: too warm")
    page.click("text=Roll back to v1")
    expect(page.locator(".flash.ok")).to_contain_text("back to the files of version 1")
    page.goto(f"/{SHARED.prefix}greeting-policy/")
    page.fill("#rename-to", "greetings")
    page.fill("#rename-why", "msg: shorter name")
    page.click("button:text-is('Rename')")
    expect(page.locator(".flash.ok")).to_contain_text("Renamed greeting-policy to greetings")
    page.fill("#delete-why", "msg: greetings move to the style guide")
    page.click("text=Delete skill")
    expect(page.locator(".flash.ok")).to_contain_text("Deleted greetings")

    def said(rows: Locator) -> list[tuple[str, str]]:
        """(By, Why) of each row of a history table."""
        by = rows.locator("td.actor").all_inner_texts()
        why = rows.locator("td.desc").all_inner_texts()
        return list(zip(by, why, strict=True))

    page.goto(f"/{SHARED.prefix}greeting-policy/history")
    expect(page.locator("table.history thead")).to_contain_text("By")
    expect(page.locator("table.history thead")).to_contain_text("Why")
    assert said(page.locator("table.history tbody tr")) == [
        (OPERATOR, "msg: shorter name"),  # the rename removed the old name
        (OPERATOR, "msg: too warm"),
        (OPERATOR, "msg: warmer"),
        (OPERATOR, "msg: new skill"),
    ]
    page.goto(f"/{SHARED.prefix}greetings/history")
    assert said(page.locator("table.history tbody tr")) == [
        (OPERATOR, "msg: greetings move to the style guide"),
        (OPERATOR, "msg: shorter name"),
    ]
    page.goto(f"/agents/{AGENT}/activity?actor={OPERATOR}")
    rows = page.locator("#activity tbody tr")
    for message, skill, action in (
        ("msg: new skill", "greeting-policy", "publish"),
        ("msg: warmer", "greeting-policy", "publish"),
        ("msg: too warm", "greeting-policy", "publish"),
        ("msg: shorter name", "greetings", "publish"),
        ("msg: shorter name", "greeting-policy", "delete"),
        ("msg: greetings move to the style guide", "greetings", "delete"),
    ):
        row = rows.filter(has_text=message).filter(
            has=page.locator(f"a.skill-link:text-is('{skill}')")
        )
        expect(row).to_have_count(1)
        expect(row.locator("td.actor")).to_have_text(OPERATOR)
        expect(row).to_contain_text(action)


def test_new_skill_refuses_the_placeholder_and_a_draft_waits_for_review(
    page: Page, store: skillfs.Store
) -> None:
    _new_skill(page, "half-written", "Not finished yet.", None)
    expect(page.locator("#new-instructions")).to_have_value(re.compile(r"1\. First step\."))
    page.click("#create-live")
    expect(page.locator("h1")).to_have_text("half-written still holds the template's text")
    expect(page.locator(".findings")).to_contain_text("('1. First step.')")
    assert "half-written" not in store.skills(SHARED)

    _new_skill(page, "half-written", "Not finished yet.", None)
    page.fill("#new-why", "to finish on Monday")
    page.click("#create-draft")
    expect(page.locator(".flash.ok")).to_contain_text("Proposed half-written as a draft")
    expect(page).to_have_url(f"/agents/{AGENT}/drafts")
    row = page.locator("#drafts tr[data-draft='half-written']")
    expect(row).to_contain_text("new skill")
    expect(row).to_contain_text("to finish on Monday")
    assert "half-written" not in store.skills(SHARED)

    # As a canary: only alice's workers see it, from the rollout panel's rule.
    _new_skill(page, "tried-by-alice", "Tried by alice first.", "1. Do the new thing.\n")
    page.fill("#new-users", "alice")
    page.press("#new-users", "Enter")  # Enter in the rule creates the canary, not a live skill
    expect(page.locator(".flash.ok")).to_contain_text("Staged tried-by-alice")
    m = store.manifest(SHARED, "tried-by-alice")
    assert m.candidate is not None and m.candidate.rollout.users == ("alice",)
    with skillfs.Skills(store, AGENT, "bob") as bob:
        assert "tried-by-alice" not in bob.snapshot().prompt()
    with skillfs.Skills(store, AGENT, "alice") as alice:
        assert "tried-by-alice" in alice.snapshot().prompt()


def _fits_one_line(toolbar: Locator) -> None:
    """The toolbar holds its buttons on one line, inside its card."""
    box = toolbar.evaluate(
        "t => ({scroll: t.scrollWidth, client: t.clientWidth, height: t.offsetHeight,"
        " tallest: Math.max(...Array.from(t.children, c => c.offsetHeight))})"
    )
    assert box["scroll"] <= box["client"], box  # nothing leaves it
    assert box["height"] < 2 * box["tallest"], box  # one row


@pytest.mark.parametrize("width", [1400, 820])
def test_the_editor_gives_the_text_the_window_and_its_toolbar_one_line(
    browser: Browser, console: ConsoleServer, store: skillfs.Store, width: int
) -> None:
    with signed_in(browser, console.url, TOKEN, width=width) as page:
        page.goto(f"/{SHARED.prefix}release-notes/files/SKILL.md")
        text = page.locator(".cm-content")
        if width == 1400:
            got = text.bounding_box()
            assert got is not None and got["width"] >= 0.6 * width, got
        toolbar = page.locator(".toolbar")
        _fits_one_line(toolbar)
        # the file tree folds away beside the text, the findings above it
        expect(page.locator("#filetree")).to_be_hidden()
        page.click("button[data-toggle='filetree']")
        expect(page.locator("#filetree")).to_be_visible()
        # a long text grows the editor, not a box inside it
        before = page.locator(".cm-editor").bounding_box()
        set_editor(page, editor_text(page) + "\nMore.\n" * 200)
        after = page.locator(".cm-editor").bounding_box()
        assert before and after and after["height"] > before["height"] + 200 * 15
        # a refused save: Save anyway joins the toolbar, still one line
        set_editor(page, "no frontmatter\n")
        page.click("#save")
        expect(page.locator("#save-anyway")).to_be_visible()
        _fits_one_line(toolbar)
        # Save as canary… opens its rule inside the card
        page.click("#canary-toggle")
        panel = page.locator("#canary-panel").bounding_box()
        form = page.locator("#editor-form").bounding_box()
        assert panel and form and panel["x"] + panel["width"] <= form["x"] + form["width"] + 1
        # a conflict where both changed the same lines: Save anyway and Save merged text
        page.goto(f"/{SHARED.prefix}sql-query-helper/files/SKILL.md")
        loaded = editor_text(page)
        heading = next(line for line in loaded.split("\n") if line.startswith("# "))
        theirs = loaded.replace(heading, heading + " (theirs)").encode()
        store.publish(
            SHARED, "sql-query-helper", {**_files(store, "sql-query-helper"), "SKILL.md": theirs}
        )
        set_editor(page, loaded.replace(heading, heading + " (mine)"))
        page.click("#save")
        expect(page.locator("#save")).to_have_text("Save merged text")
        page.click("#save")  # the markers are still there: refused, Save anyway offered
        expect(page.locator("#save-anyway")).to_be_visible()
        _fits_one_line(toolbar)


def _files(store: skillfs.Store, skill: str) -> dict[str, bytes]:
    m = store.manifest(SHARED, skill)
    return {path: store.read(SHARED, skill, path) for path in m.files}


def test_no_page_logs_an_error_or_a_failed_request(page: Page, store: skillfs.Store) -> None:
    """Every kind of page, with what makes it busiest (a staged candidate, a draft, a user's
    override): `signed_in` fails the test on any script or console error or failed request."""
    files = _files(store, "code-reviewer")
    files["SKILL.md"] += b"\nCanary.\n"
    store.rollouts.stage(SHARED, "code-reviewer", files, Rollout(users=["alice"], fraction=0.1))
    store.drafts.propose(
        SHARED, "release-notes", {**_files(store, "release-notes"), "NOTES.md": b"x\n"}
    )
    store.edits.override(ALICE, "sql-query-helper")
    skill = f"/{SHARED.prefix}code-reviewer"
    for url in (
        "/",
        f"/agents/{AGENT}/",
        f"/{SHARED.prefix}",
        f"/{ALICE.prefix}",
        f"{skill}/",
        f"{skill}/files/SKILL.md",
        f"{skill}/files/SKILL.md?candidate=1",
        f"{skill}/files/references/checklist.md",
        f"{skill}/history",
        f"{skill}/diff?candidate=1",
        f"/{ALICE.prefix}sql-query-helper/diff?base=shared",
        f"/agents/{AGENT}/users/alice/",
        f"/agents/{AGENT}/activity",
        f"/agents/{AGENT}/drafts",
        f"/{SHARED.prefix}_drafts/release-notes/",
        f"/agents/{AGENT}/curation",
        "/agents?agent=suport-bot",  # did you mean support-bot?
    ):
        reply = page.goto(url)
        assert reply is not None and reply.status == 200, url
        expect(page.locator("h1").first).to_be_visible()
        if "suport-bot" in url:
            expect(page.locator("h1")).to_have_text(
                "No agent “suport-bot” yet. Did you mean support-bot?"
            )

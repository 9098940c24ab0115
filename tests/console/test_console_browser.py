"""The admin console in a real browser: Debian's headless chromium driven by Playwright.

One browser and one console (over an SQLite store other processes open too) per module. The
story an operator lives through: sign in, edit a skill, see a validation error as they type,
fix it, save; watch a separate worker process pick the edit up at its next snapshot; hit a
conflict made by a concurrent `skillfs edit` in another process and resolve it; roll back;
give one user an override and see what that user now sees.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page, expect

import skillfs
from skillfs.console import ConsoleServer, make_app, serve
from skillfs.model import File, Scope
from tests.browser_helpers import (  # noqa: F401  (module_browser: a fixture)
    chromium,
    editor_text,
    module_browser,
    set_editor,
    sign_in,
    signed_in,
    watch_errors,
)
from tests.console.test_console import example_files

TOKEN = "browser-admin-token-0123456789"
AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('console') / 'skills.db'}"


@pytest.fixture(scope="module")
def store(store_url: str) -> Iterator[skillfs.Store]:
    s = skillfs.open_store(store_url)
    for name in ("code-reviewer", "release-notes", "sql-query-helper"):
        s.publish(SHARED, name, example_files(name))
    yield s
    s.close()


@pytest.fixture(scope="module")
def console(store: skillfs.Store) -> Iterator[ConsoleServer]:
    server = serve(make_app(store, admin_token=TOKEN))
    yield server
    server.stop()


@pytest.fixture
def page(browser: Browser, console: ConsoleServer) -> Iterator[Page]:
    with signed_in(browser, console.url, TOKEN) as pg:
        yield pg


class Worker:
    """A separate agent-worker process: each `step()` takes a snapshot, like a reasoning step."""

    SCRIPT = textwrap.dedent(
        """
        import json, sys
        import skillfs
        skills = skillfs.Skills(sys.argv[1], sys.argv[2], sys.argv[3])
        for line in sys.stdin:
            snap = skills.snapshot()
            rev = snap.revisions[f"agents/{sys.argv[2]}"]
            print(json.dumps({"revision": rev.counter if rev else None,
                              "prompt": snap.prompt(),
                              "skill_md": snap.load(line.strip())}), flush=True)
        """
    )

    def __init__(self, store_url: str, agent: str, user: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, store_url, agent, user],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )

    def step(self, skill: str) -> dict[str, Any]:
        assert self.proc.stdin and self.proc.stdout
        self.proc.stdin.write(skill + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the worker process died"
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        self.proc.wait(timeout=10)


@pytest.fixture
def worker(store_url: str, store: skillfs.Store) -> Iterator[Worker]:
    w = Worker(store_url, AGENT, "alice")
    yield w
    w.close()


def cli_edit(store_url: str, tmp_path: Path, skill: str, old: str, new: str) -> None:
    """`skillfs edit` in its own process, with an $EDITOR that replaces `old` by `new`."""
    editor = tmp_path / "editor.py"
    editor.write_text(
        "import sys, pathlib\n"
        "p = pathlib.Path(sys.argv[1])\n"
        f"p.write_text(p.read_text().replace({old!r}, {new!r}))\n"
    )
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from skillfs.cli.app import main; main()",
            "edit",
            f"{skill}/SKILL.md",
            "--scope",
            str(SHARED),
            "--store",
            store_url,
        ],
        env={**os.environ, "PYTHONPATH": str(ROOT), "EDITOR": f"{sys.executable} {editor}"},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_edit_validate_save_conflict_rollback_override(
    page: Page, store: skillfs.Store, store_url: str, worker: Worker, tmp_path: Path
) -> None:
    skill = "code-reviewer"
    before = worker.step(skill)
    assert "## Steps\n" in before["skill_md"]

    # Browse like a person: agent -> shared skills -> skill -> editor.
    page.click("nav.sidebar >> text=support-bot")
    page.click(f"a.skill-link >> text={skill}")
    expect(page.locator("h1")).to_contain_text(skill)
    page.click("text=Edit SKILL.md")
    expect(page.locator("#check-status")).to_have_text("valid")
    numbers = page.locator(".cm-lineNumbers .cm-gutterElement")
    expect(numbers.last).to_have_text(str(editor_text(page).count("\n") + 1))
    v1 = store.manifest(SHARED, skill).version
    original = editor_text(page)

    # A spec violation shows up as you type, with its line marked in the gutter.
    broken = original.replace(f"name: {skill}", "name: Code_Reviewer")
    set_editor(page, broken)
    expect(page.locator("#check-status")).to_contain_text("error")
    expect(page.locator("#findings .finding.error").first).to_contain_text("name")
    expect(numbers.filter(has_text=re.compile(r"^2$"))).to_have_class(re.compile(r"\bbad\b"))

    # Saving it anyway needs the explicit second button; a plain save stores nothing.
    page.click("#save")
    expect(page.locator("#rejected")).to_be_visible()
    expect(page.locator("#save-anyway")).to_be_visible()
    assert editor_text(page) == broken
    assert store.manifest(SHARED, skill).version == v1

    # Fix it and save: the store has the edit, and the worker's next step sees it.
    fixed = original.replace("## Steps\n", "## Steps (edited in the console)\n")
    set_editor(page, fixed)
    expect(page.locator("#check-status")).to_have_text("valid")
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text(f"is now version {v1 + 1}")
    assert store.read(SHARED, skill, "SKILL.md").decode() == fixed
    after = worker.step(skill)
    assert "## Steps (edited in the console)" in after["skill_md"]
    assert after["revision"] > before["revision"]

    # Someone edits the same file with the CLI while the editor is open: the live revision
    # moves, a banner warns. Asked to stop then, saving shows what they changed instead of
    # writing anything; **Merge with version N** then writes both edits (edit_file's policies).
    expect(page.locator("#live.connected")).to_be_visible()
    shown_revision = int(page.inner_text("#live-rev"))
    cli_edit(store_url, tmp_path, skill, "Understand the intent", "Understand the goal")
    expect(page.locator("#stale-banner")).to_be_visible()
    expect(page.locator("#live-rev")).not_to_have_text(str(shown_revision))
    mine = fixed.replace("# Code reviewer", "# Code reviewer, careful edition")
    set_editor(page, mine)
    page.select_option("#on-conflict", "fail")
    page.fill("#save-why", "a careful edition")
    page.click("#save")
    conflict = page.locator("#conflict")
    expect(conflict).to_contain_text("changed while you were editing")
    expect(conflict).to_contain_text("Understand the goal")  # their change, in the diff
    expect(conflict).to_contain_text("you chose to stop")
    assert editor_text(page) == mine  # the operator's text, as typed
    expect(page.locator("#save-why")).to_have_value("a careful edition")  # the message kept
    assert "careful edition" not in store.read(SHARED, skill, "SKILL.md").decode()

    # Merge: their line and mine, written on their version, nothing lost.
    expect(page.locator("#save")).to_have_text(f"Merge with version {v1 + 2}")
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text(f"is now version {v1 + 3}")
    expect(page.locator(".flash.ok")).to_contain_text("their changes kept")
    merged = mine.replace("Understand the intent", "Understand the goal")
    assert store.read(SHARED, skill, "SKILL.md").decode() == merged
    assert editor_text(page) == merged
    assert store.manifest(SHARED, skill).message == "a careful edition"

    # Roll back to the first version from the history page.
    page.click("a.btn >> text=History")
    expect(page.locator("table.history tbody tr")).to_have_count(4)
    page.click(f"text=Roll back to v{v1}")
    expect(page.locator(".flash.ok")).to_contain_text(f"back to the files of version {v1}")
    assert store.read(SHARED, skill, "SKILL.md").decode() == original
    page.check(f"input[name=a][value='{v1 + 1}']")
    page.check(f"input[name=b][value='{v1 + 3}']")
    page.click("text=Compare A → B")
    expect(page.locator("table.diff").first).to_contain_text("careful edition")

    # A per-user override: alice gets her own copy, edits it, and only she sees the edit.
    page.goto(f"/{SHARED.prefix}{skill}/")
    page.fill("#ov-user", "alice")
    page.fill("#ov-why", "alice reviews in her own words")
    page.click("text=Create override")
    expect(page.locator(".flash.ok")).to_contain_text("Created alice")
    alice_md = editor_text(page).replace("description: Reviews", "description: For Alice, reviews")
    set_editor(page, alice_md)
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text("Saved SKILL.md")
    assert worker.step(skill)["prompt"].count("For Alice, reviews") == 1
    assert store.manifest(ALICE, skill).version == 2
    assert store.versions(ALICE, skill)[-1].message == "alice reviews in her own words"
    page.goto(f"/agents/{AGENT}/users/alice/")
    expect(page.locator("#prompt-block")).to_contain_text("For Alice, reviews")
    expect(page.locator("text=shadows shared:support-bot")).to_be_visible()
    page.goto(f"/{SHARED.prefix}{skill}/")
    expect(page.locator("aside")).to_contain_text("alice")
    with skillfs.Skills(store, AGENT, "bob") as bob:
        assert "For Alice" not in bob.snapshot().prompt()


def test_create_upload_rename_delete(page: Page, store: skillfs.Store, tmp_path: Path) -> None:
    page.goto(f"/{SHARED.prefix}")
    page.click("text=New skill")
    page.fill("#new-name", "refund-policy")
    page.fill("#new-description", "Explains refunds: when they apply and how much.")
    page.fill("#new-instructions", "1. Check the order.\n2. Refund within 30 days.\n")
    page.click("text=Create skill")
    expect(page.locator(".flash.ok")).to_contain_text("Created refund-policy")
    expect(page.locator("#check-status")).to_have_text("valid")
    assert store.manifest(SHARED, "refund-policy").version == 1

    # A binary asset, uploaded and downloaded back byte for byte.
    logo = tmp_path / "logo.png"
    logo.write_bytes(bytes(range(256)) * 8)
    page.goto(f"/{SHARED.prefix}refund-policy/")
    page.set_input_files("#up-file", str(logo))
    page.fill("input[name=dir]", "assets")
    page.click("form[enctype] button:text-is('Upload')")
    expect(page.locator(".flash.ok")).to_contain_text("Uploaded assets/logo.png")
    with page.expect_download() as got:
        page.click("tr:has-text('logo.png') >> text=Download")
    saved = tmp_path / "back.png"
    got.value.save_as(saved)
    assert saved.read_bytes() == logo.read_bytes()

    # Rename in one commit, saying why; the frontmatter name follows.
    page.fill("#rename-to", "refunds")
    page.fill("#rename-why", "a shorter name")
    page.click("button:text-is('Rename')")
    expect(page.locator(".flash.ok")).to_contain_text("Renamed refund-policy to refunds")
    assert "refund-policy" not in store.skills(SHARED)
    fm = store.manifest(SHARED, "refunds").frontmatter
    assert fm is not None and fm["name"] == "refunds"
    # The message is the commit's: on the History page and the Activity page, by the token.
    page.click("a.btn >> text=History")
    expect(page.locator("table.history tbody tr").first).to_contain_text("a shorter name")
    page.goto(f"/agents/{AGENT}/activity")
    rows = page.locator("table tbody tr", has_text="a shorter name")
    expect(rows).to_have_count(2)  # refunds written, refund-policy deleted: one commit
    expect(rows.filter(has_text="refund-policy")).to_contain_text("delete")
    page.goto(f"/{SHARED.prefix}refunds/")

    # Delete (after the confirm dialog), then restore from the deleted skill's page.
    page.fill("#delete-why", "refunds move to billing")
    page.click("text=Delete skill")
    expect(page.locator(".flash.ok")).to_contain_text("Deleted refunds")
    assert "refunds" not in store.skills(SHARED)
    assert store.versions(SHARED, "refunds")[0].message == "refunds move to billing"
    page.goto(f"/{SHARED.prefix}refunds/")
    page.click("text=Restore version")
    expect(page.locator(".flash.ok")).to_contain_text("Rolled refunds back")
    assert "refunds" in store.skills(SHARED)


def test_every_action_works_without_javascript(
    browser: Browser, console: ConsoleServer, store: skillfs.Store, tmp_path: Path
) -> None:
    """console.js only folds New skill, Upload zip and Save as canary… behind their buttons:
    without it they are on the page as plain forms, and the buttons (which need it) are not."""
    with signed_in(browser, console.url, TOKEN, javascript=False) as pg:
        pg.goto(f"/{SHARED.prefix}")
        expect(pg.locator("button[data-toggle]")).to_have_count(2)
        expect(pg.locator("button[data-toggle]:visible")).to_have_count(0)
        expect(pg.locator("#import-zip")).to_be_visible()
        pg.fill("#new-name", "no-script")
        pg.fill("#new-description", "Made without JavaScript.")
        pg.fill("#new-instructions", "1. Works as a plain form.\n")
        pg.click("text=Create skill")
        expect(pg.locator(".flash.ok")).to_contain_text("Created no-script")
        expect(pg.locator("#canary-toggle")).to_be_hidden()
        pg.fill("#canary-users", "alice")
        pg.click("#save-canary")
        expect(pg.locator(".flash.ok")).to_contain_text("Staged SKILL.md as a canary")
    m = store.manifest(SHARED, "no-script")
    assert m.candidate is not None and m.candidate.rollout.users == ("alice",)


def test_the_script_folds_the_panels_behind_their_buttons(page: Page) -> None:
    page.goto(f"/{SHARED.prefix}")
    expect(page.locator("#new-skill")).to_be_hidden()
    expect(page.locator("#import-zip")).to_be_hidden()
    page.click("text=Upload zip")
    expect(page.locator("#import-zip")).to_be_visible()
    page.goto(f"/{SHARED.prefix}code-reviewer/files/SKILL.md")
    expect(page.locator("#canary-panel")).to_be_hidden()
    page.click("#canary-toggle")
    expect(page.locator("#canary-envs")).to_be_focused()


def test_the_keyboard_gets_out_of_the_editor_and_past_the_sidebar(page: Page) -> None:
    page.goto(f"/{SHARED.prefix}code-reviewer/files/SKILL.md")
    page.keyboard.press("Tab")  # the first stop of every page
    expect(page.locator(".skip-link")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page.locator("main")).to_be_focused()
    text = page.locator(".cm-content")
    expect(text).to_have_attribute("aria-label", "Contents of SKILL.md")  # for a screen reader
    text.focus()
    before = editor_text(page)
    page.keyboard.press("Tab")  # indents
    expect(text).to_be_focused()
    assert editor_text(page) == "  " + before
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")  # leaves, forwards
    expect(text).not_to_be_focused()
    assert editor_text(page) == "  " + before
    text.focus()
    page.keyboard.press("Tab")  # indents again: Escape counts for one Tab
    assert editor_text(page) == "    " + before
    page.keyboard.press("Control+s")  # saves (refused: the frontmatter no longer opens line 1)
    expect(page.locator("#rejected")).to_contain_text("breaks the Agent Skills spec")


def test_zip_upload_from_the_browser(page: Page, store: skillfs.Store, tmp_path: Path) -> None:
    import zipfile

    archive = tmp_path / "skills.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for name in ("incident-postmortem", "api-docs-writer"):
            for path, f in example_files(name).items():
                z.writestr(f"{name}/{path}", f.data)
    page.goto(f"/{SHARED.prefix}")
    page.click("text=Upload zip")
    page.set_input_files("#zip-file", str(archive))
    page.click("#import-zip button:text-is('Upload')")
    expect(page.locator(".flash.ok")).to_contain_text(
        "Imported api-docs-writer, incident-postmortem"
    )
    assert {"api-docs-writer", "incident-postmortem"} <= set(store.skills(SHARED))


def test_sign_out_and_bad_token(page: Page) -> None:
    page.click("text=Sign out")
    expect(page.locator("h1")).to_have_text("Sign in")
    page.fill("#token", "wrong-token-wrong-token")
    page.click("button[type=submit]")
    expect(page.locator(".flash.error")).to_contain_text("Unknown or revoked token")
    page.goto("/agents/support-bot/")
    expect(page).to_have_url("/login?next=/agents/support-bot/")
    sign_in(page, TOKEN)


def test_served_by_skillfs_serve(browser: Browser, tmp_path: Path) -> None:
    """The console on the HTTP port of a real server: its tokens file decides who signs in and
    what they may do, and an edit made in the page reaches a `grpc://` client of the server."""
    from support.grpc_servers import ALICE, running

    with running(f"sqlite:///{tmp_path / 'served.db'}", tmp_path) as server:
        server.store.publish(SHARED, "code-reviewer", example_files("code-reviewer"))
        context = browser.new_context(base_url=f"http://127.0.0.1:{server.http_port}")
        page = context.new_page()
        page.on("dialog", lambda dialog: dialog.accept())
        errors = watch_errors(page)
        page.goto("/")
        page.fill("#token", ALICE)  # may write alice's scope, only read the shared one
        page.click("button[type=submit]")
        page.goto(f"/{SHARED.prefix}code-reviewer/files/SKILL.md")
        expect(page.locator("#content")).to_have_attribute("readonly", "")
        page.goto(f"/{SHARED.prefix}code-reviewer/")
        page.fill("#ov-user", "alice")
        page.click("text=Create override")
        expect(page.locator(".flash.ok")).to_contain_text("Created alice")
        set_editor(page, editor_text(page).replace("## Steps", "## Alice's steps"))
        page.click("#save")
        expect(page.locator(".flash.ok")).to_contain_text("is now version 2")
        context.close()
        assert not errors, errors
        client = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ALICE)
        try:
            with skillfs.Skills(client, AGENT, "alice") as skills:
                assert "## Alice's steps" in skills.snapshot().load("code-reviewer")
        finally:
            client.close()


@pytest.fixture
def other_page(browser: Browser, console: ConsoleServer) -> Iterator[Page]:
    """A second operator's browser, signed in with the same token."""
    with signed_in(browser, console.url, TOKEN) as pg:
        yield pg


def test_filter_box_and_folding(page: Page, store: skillfs.Store) -> None:
    files = dict(example_files("code-reviewer"))
    files["SKILL.md"] = File(files["SKILL.md"].data.replace(b"code-reviewer", b"big-skill"))
    for folder in ("references", "scripts", "assets/img"):
        files.update({f"{folder}/part-{i:02d}.md": File(b"x\n") for i in range(12)})
    files["references/needle-in-the-haystack.md"] = File(b"found\n")
    store.publish(SHARED, "big-skill", files)

    # The skill page: over 30 files, so its directories start folded; a click unfolds one.
    page.goto(f"/{SHARED.prefix}big-skill/")
    needle = page.locator("tr[data-path='references/needle-in-the-haystack.md']")
    expect(needle).to_be_hidden()
    expect(page.locator("tr[data-path='SKILL.md']")).to_be_visible()
    page.click("tr[data-dir='references'] .folder")
    expect(needle).to_be_visible()
    expect(page.locator("tr[data-dir='references'] .folder")).to_have_attribute(
        "aria-expanded", "true"
    )
    expect(page.locator("tr[data-path='scripts/part-00.md']")).to_be_hidden()
    # Filtering shows the matching files (and their directories) whatever is folded.
    page.click("button[data-fold='files'][data-open='0']")
    expect(needle).to_be_hidden()
    page.fill("#filter-files", "needle")
    expect(needle).to_be_visible()
    expect(page.locator("tr[data-dir='references']")).to_be_visible()
    expect(page.locator("tr[data-dir='scripts']")).to_be_hidden()
    expect(page.locator("[data-filter-count='files']")).to_have_text("1 of 40 shown")
    page.fill("#filter-files", "")
    expect(needle).to_be_hidden()  # folded again
    title = needle.locator("a.file-link").get_attribute("title")
    assert title == "references/needle-in-the-haystack.md"  # the full name on hover

    # The scope page: typing filters the rows shown; Enter asks the server (?q=).
    page.goto(f"/{SHARED.prefix}")
    rows = page.locator("#skills tbody tr")
    page.fill("#filter-skills", "big")
    expect(rows.filter(has_text="big-skill")).to_be_visible()
    expect(rows.filter(has_text="release-notes")).to_be_hidden()
    page.press("#filter-skills", "Enter")
    expect(page).to_have_url(re.compile(r"\?q=big$"))
    expect(rows).to_have_count(1)
    page.click("text=Clear")
    expect(rows.filter(has_text="release-notes")).to_be_visible()


def test_deleted_skills_are_listed_and_restored(page: Page, store: skillfs.Store) -> None:
    files = dict(example_files("release-notes"))
    files["SKILL.md"] = File(files["SKILL.md"].data.replace(b"release-notes", b"old-notes"))
    v = store.publish(SHARED, "old-notes", files).version
    store.delete(SHARED, "old-notes", expected_version=v)
    page.goto(f"/{SHARED.prefix}")
    row = page.locator("#deleted-skills tr", has_text="old-notes")
    expect(row).to_contain_text(f"v{v + 1}")
    expect(row).to_contain_text("UTC")
    # its own page (what was deleted, Restore version N) is one click away
    row.locator("a.skill-link").click()
    expect(page.locator("h1")).to_contain_text("deleted")
    expect(page.locator("text=Restore version")).to_be_visible()
    page.go_back()
    page.locator("#deleted-skills tr", has_text="old-notes").locator("text=Restore").click()
    expect(page.locator(".flash.ok")).to_contain_text(f"Restored old-notes from version {v}")
    expect(page.locator("h1")).to_contain_text("old-notes")
    assert store.manifest(SHARED, "old-notes").version == v + 2
    page.goto(f"/{SHARED.prefix}")
    expect(page.locator("#deleted-skills tr", has_text="old-notes")).to_have_count(0)


def test_two_operators_edit_the_same_lines_and_merge(
    page: Page, other_page: Page, store: skillfs.Store
) -> None:
    skill = "sql-query-helper"
    url = f"/{SHARED.prefix}{skill}/files/SKILL.md"
    page.goto(url)
    other_page.goto(url)
    original = editor_text(page)
    heading = next(line for line in original.split("\n") if line.startswith("# "))

    # The first operator saves; the second, who loaded the same version, saves after.
    first = original.replace(heading, heading + " (first)")
    set_editor(page, first)
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text("Saved SKILL.md")
    second = original.replace(heading, heading + " (second)")
    set_editor(other_page, second)
    other_page.click("#save")

    # The second save shows the merge: both headings between conflict markers.
    expect(other_page.locator("#conflict")).to_contain_text("the same lines")
    merged = editor_text(other_page)
    assert f"<<<<<<< your edit\n{heading} (second)\n=======\n{heading} (first)\n" in merged
    expect(other_page.locator("#save")).to_have_text("Save merged text")
    expect(other_page.locator("#overwrite")).to_have_text("Overwrite with my text")
    # Saving the markers as they are is refused, and nothing is written.
    other_page.click("#save")
    expect(other_page.locator("#rejected")).to_contain_text("conflict markers")
    assert store.read(SHARED, skill, "SKILL.md").decode() == first

    # Resolving the markers and saving keeps both operators' words.
    resolved = original.replace(heading, heading + " (first and second)")
    set_editor(other_page, resolved)
    other_page.click("#save")
    expect(other_page.locator(".flash.ok")).to_contain_text("Saved SKILL.md")
    assert store.read(SHARED, skill, "SKILL.md").decode() == resolved

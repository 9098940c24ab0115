"""Take the console screenshots in this directory: `python docs/screenshots/take.py`.

Seeds a throw-away SQLite store with the example skills, a few edits, per-user overrides and a
market, serves the console, and photographs its main pages in Debian's headless chromium.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

from playwright.sync_api import Page

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

import skillfs  # noqa: E402
from skillfs.console import make_app, serve  # noqa: E402
from skillfs.model import File, Scope  # noqa: E402
from tests.browser_helpers import chromium, editor_text, set_editor  # noqa: E402

OUT = Path(__file__).resolve().parent
TOKEN = "screenshot-admin-token-0123"
AGENT = "support-bot"
SHARED = Scope.shared(AGENT)


def files_of(directory: Path) -> dict[str, File]:
    return {
        p.relative_to(directory).as_posix(): File(p.read_bytes(), mode=p.stat().st_mode & 0o777)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


def seed(store: skillfs.Store) -> None:
    for directory in sorted((ROOT / "examples" / "skills").iterdir()):
        store.publish(SHARED, directory.name, files_of(directory))
    reviewer = files_of(ROOT / "examples" / "skills" / "code-reviewer")
    md = reviewer["SKILL.md"].data.decode()
    for old, new, why in [
        ("## Steps", "## Steps to follow", "a clearer heading"),
        (
            "Do not stop at the first finding.",
            "Do not stop at the first finding; list them all.",
            "reviews stopped at the first bug",
        ),
    ]:
        md = md.replace(old, new)
        reviewer["SKILL.md"] = File(md.encode())
        store.publish(SHARED, "code-reviewer", reviewer, actor="oncall-ana", message=why)
    for user in ("alice", "bob"):
        scope = Scope.user(AGENT, user)
        store.publish(
            scope,
            "code-reviewer",
            {
                **reviewer,
                "SKILL.md": File(
                    md.replace(
                        "description: Reviews", f"description: For {user.title()}'s team, reviews"
                    ).encode()
                ),
            },
        )
    store.publish(
        Scope.user(AGENT, "alice"),
        "tone-of-voice",
        {
            "SKILL.md": b"---\nname: tone-of-voice\ndescription: Writes replies in Alice's "
            b"customer-friendly tone.\n---\n\n# Tone of voice\n\nShort sentences. No jargon.\n"
        },
    )
    old = b"---\nname: faq-answers\ndescription: Answers the FAQ (now the help center).\n---\n"
    store.publish(SHARED, "faq-answers", {"SKILL.md": old})
    store.delete(SHARED, "faq-answers")  # listed under "Deleted skills" with Restore
    store.publish(
        Scope.market("team"),
        "sql-query-helper",
        files_of(ROOT / "examples" / "skills" / "sql-query-helper"),
    )


def seed_governance(store: skillfs.Store) -> None:
    """A staged candidate, a disabled skill, drafts to review: the governance pages' stories
    (docs/console.md, "Staged rollout", "Review queue")."""
    notes = files_of(ROOT / "examples" / "skills" / "release-notes")
    md = notes["SKILL.md"].data.decode()
    notes["SKILL.md"] = File(
        md.replace("# Release notes", "# Release notes (grouped by area)").encode()
    )
    store.rollouts.stage(
        SHARED, "release-notes", notes,
        skillfs.Rollout(environments=["staging"], fraction=0.5, match="all",
                        excluded_users=["bob"]),
        options=skillfs.WriteOptions(actor="oncall-ana", message="group the notes by product area"),
    )  # fmt: skip
    store.drafts.propose(
        Scope.user(AGENT, "alice"),
        "refund-policy",
        {
            "SKILL.md": b"---\nname: refund-policy\ndescription: Explains the refund policy "
            b"and starts a refund when the customer qualifies.\n---\n\n# Refund policy\n\n"
            b"Refunds within 30 days of purchase; ask for the order number first.\n"
        },
        options=skillfs.WriteOptions(
            actor=f"agent:{AGENT}/alice", message="customers ask for refunds every day"
        ),
    )


def shoot(page: Page, name: str, full: bool = False) -> None:
    page.wait_for_timeout(300)
    page.screenshot(path=str(OUT / f"{name}.png"), full_page=full)
    print("wrote", OUT / f"{name}.png")


def main() -> None:
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        store = skillfs.open_store(f"sqlite:///{tmp}/skills.db")
        seed(store)
        server = serve(make_app(store, admin_token=TOKEN))
        try:
            with chromium() as browser:
                page = browser.new_page(
                    base_url=server.url, viewport={"width": 1360, "height": 820}
                )
                page.on("dialog", lambda d: d.accept())
                page.goto("/")
                shoot(page, "login")
                page.fill("#token", TOKEN)
                page.click("button[type=submit]")
                page.goto(f"/agents/{AGENT}/")
                shoot(page, "agent")
                page.goto(f"/{SHARED.prefix}")
                shoot(page, "scope", full=True)
                skill = f"/{SHARED.prefix}code-reviewer/"
                page.goto(skill)
                shoot(page, "skill")
                page.goto(skill + "files/SKILL.md")
                shoot(page, "editor")
                text = editor_text(page)
                set_editor(
                    page,
                    text.replace("name: code-reviewer", "name: Code Reviewer").replace(
                        "license: Apache-2.0", "license: Apache-2.0\nowner: platform"
                    ),
                )
                page.wait_for_selector("#check-status.bad")
                page.fill("#save-why", "name the owning team")
                page.click("#save")
                page.wait_for_selector("#rejected")
                shoot(page, "editor-validation")
                page.goto(skill + "files/SKILL.md")
                reviewer = store.manifest(SHARED, "code-reviewer")
                current = store.read(SHARED, "code-reviewer", "SKILL.md").decode()
                store.publish(
                    SHARED,
                    "code-reviewer",
                    {
                        **{
                            p: File(store.read_entry(e), mode=e.mode)
                            for p, e in reviewer.files.items()
                        },
                        "SKILL.md": File(
                            current.replace("Understand the intent", "Understand the goal").encode()
                        ),
                    },
                    expected_version=reviewer.version,
                )
                set_editor(
                    page,
                    editor_text(page).replace("Understand the intent", "Understand the purpose"),
                )
                page.click("#save")
                page.wait_for_selector("#conflict")
                shoot(page, "conflict")
                page.goto(skill + "history")
                shoot(page, "history")
                page.goto(skill + "diff?a=1&b=3")
                shoot(page, "diff")
                page.goto(f"/agents/{AGENT}/users/alice/?market=team")
                shoot(page, "user-view")
                seed_governance(store)
                page.goto(skill.replace("code-reviewer", "release-notes"))
                shoot(page, "rollout")
                page.goto(f"/agents/{AGENT}/drafts")
                page.click("#drafts a.skill-link")
                shoot(page, "draft")
                page.goto(f"/agents/{AGENT}/activity")
                shoot(page, "activity")
        finally:
            server.stop()
            store.close()


if __name__ == "__main__":
    main()

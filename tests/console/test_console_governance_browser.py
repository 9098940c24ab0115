"""The console's governance pages in a real browser (headless chromium through Playwright),
as test_console_browser.py: every page of the story must load with no script error, console
error or failed request.

The operator signs in as `oncall-ana` (a token of the deployment's tokens config), edits a
skill and finds the edit on the Activity page under that name; disables a shared skill with a
reason and sees it leave what a user sees, then enables it again; hides one skill from one
user alone and unhides it.
"""

from __future__ import annotations

from playwright.sync_api import Page, expect

import skillfs
from skillfs.governance.rollout_rule import gets_candidate
from skillfs.model import Scope
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
    operator_console,
    operator_page,
    operator_store,
)
from tests.console.test_console import example_files


def test_activity_shows_the_console_user_as_actor(page: Page, store: skillfs.Store) -> None:
    skill = "sql-query-helper"
    page.goto(f"/{SHARED.prefix}{skill}/")
    page.click("text=Edit SKILL.md")
    set_editor(page, editor_text(page).replace("description: ", "description: Careful. "))
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text("Saved SKILL.md")
    version = store.manifest(SHARED, skill).version

    page.goto(f"/agents/{AGENT}/")
    page.click("a.btn >> text=Activity")
    expect(page.locator("h1")).to_contain_text(f"Activity of {AGENT}")
    first = page.locator("#activity tbody tr").first
    expect(first.locator(".skill-link")).to_have_text(skill)
    expect(first.locator("td.actor")).to_have_text(OPERATOR)
    expect(first).to_contain_text(f"v{version}")
    expect(first).to_contain_text("publish")

    # filter by the actor (its link), then by the skill through the form
    first.locator("td.actor a").click()
    expect(page.locator("#f-actor")).to_have_value(OPERATOR)
    expect(page.locator("#activity td.actor")).to_have_text([OPERATOR])
    page.fill("#f-actor", "")
    page.fill("#f-skill", "release-notes")
    page.click("#activity-filters button[type=submit]")
    expect(page.locator("#activity .skill-link")).to_have_text(["release-notes"])
    expect(page.locator("#activity td.actor")).to_have_text(["seed"])


def test_disable_with_reason_leaves_the_user_view_and_enable_brings_it_back(
    page: Page, store: skillfs.Store
) -> None:
    skill = "code-reviewer"
    view = f"/agents/{AGENT}/users/alice/"
    page.goto(view)
    expect(page.locator(f"tr[data-skill={skill}]")).to_be_visible()

    page.goto(f"/{SHARED.prefix}{skill}/")
    page.fill("#disable-reason", "leaks the API key")
    page.click("#disable-form button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("Disabled code-reviewer: leaks the API key")
    expect(page.locator("#disabled-banner")).to_contain_text("leaks the API key")
    m = store.manifest(SHARED, skill)
    assert m.disabled and m.disabled_reason == "leaks the API key" and m.actor == OPERATOR

    page.goto(f"/{SHARED.prefix}")
    expect(page.locator("#skills tr.is-disabled .skill-link")).to_have_text([skill])
    page.goto(view)
    expect(page.locator(f"tr[data-skill={skill}]")).to_have_count(0)
    expect(page.locator(f"[data-left-out={skill}]")).to_contain_text("leaks the API key")
    expect(page.locator("#prompt-block")).not_to_contain_text(skill)
    with skillfs.Skills(store, AGENT, "alice") as skills:
        assert skill not in skills.snapshot().prompt()

    page.locator(f"[data-left-out={skill}] a").click()
    page.click("#disabled-banner button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("Enabled code-reviewer")
    page.goto(view)
    expect(page.locator(f"tr[data-skill={skill}]")).to_be_visible()
    expect(page.locator("#prompt-block")).to_contain_text(skill)


def test_hide_a_skill_from_one_user_and_unhide_it(page: Page, store: skillfs.Store) -> None:
    skill = "release-notes"
    page.goto(f"/agents/{AGENT}/users/alice/")
    row = page.locator(f"tr[data-skill={skill}]")
    row.locator("input[name=message]").fill("alice writes her own")
    row.locator("button >> text=Hide from alice").click()
    expect(page.locator(".flash.ok")).to_contain_text("Hid release-notes from alice")
    expect(page.locator(f"tr[data-skill={skill}]")).to_have_count(0)
    expect(page.locator(f"[data-left-out={skill}]")).to_contain_text("hidden from alice")
    with skillfs.Skills(store, AGENT, "bob") as bob:
        assert skill in bob.snapshot().prompt()  # everyone else still sees it

    # alice's scope lists it as hidden, not as a skill of hers with no files
    page.goto(f"/{ALICE.prefix}")
    expect(page.locator("#skills")).to_have_count(0)
    expect(page.locator("#hidden-skills .skill-link")).to_have_text([skill])
    page.click(f"#hidden-skills .skill-link >> text={skill}")
    expect(page.locator("#hidden-entry")).to_contain_text("hidden from this user")
    expect(page.locator("#hidden-entry")).to_contain_text("alice writes her own")
    page.click("text=Unhide for alice")
    expect(page.locator(".flash.ok")).to_contain_text("no longer hidden from alice")
    assert skill not in store.manifests(ALICE)
    page.goto(f"/agents/{AGENT}/users/alice/")
    expect(page.locator(f"tr[data-skill={skill}]")).to_be_visible()


def test_save_as_canary_widen_and_promote(page: Page, store: skillfs.Store) -> None:
    skill = "release-notes"
    live = store.read(SHARED, skill, "SKILL.md").decode()
    page.goto(f"/{SHARED.prefix}{skill}/files/SKILL.md")
    edited = editor_text(page).replace("# Release notes", "# Release notes (canary)")
    assert edited != editor_text(page)
    set_editor(page, edited)
    page.click("#canary-toggle")
    page.fill("#canary-users", "alice")
    page.press("#canary-users", "Enter")  # stages: Enter never falls through to a plain Save
    expect(page.locator(".flash.ok")).to_contain_text("Staged SKILL.md as a canary for users alice")
    expect(page.locator("#rollout-rule")).to_have_text("users alice")
    assert store.read(SHARED, skill, "SKILL.md").decode() == live  # live for everyone else
    m = store.manifest(SHARED, skill)
    assert m.candidate is not None and m.candidate.actor == OPERATOR

    page.goto(f"/agents/{AGENT}/users/alice/")
    expect(page.locator(f"tr[data-skill={skill}] td.gets")).to_contain_text("candidate")
    page.goto(f"/agents/{AGENT}/users/bob/")
    expect(page.locator(f"tr[data-skill={skill}] td.gets")).to_contain_text("not for bob")

    page.goto(f"/{SHARED.prefix}{skill}/")
    page.fill("#widen-percent", "50")
    page.click("#widen-form button[type=submit]")
    expect(page.locator(".flash.ok")).to_contain_text("to users alice or 50 % of users")
    expect(page.locator("#rollout-rule")).to_have_text("users alice or 50 % of users")
    page.click("#promote")
    expect(page.locator(".flash.ok")).to_contain_text("Promoted release-notes")
    expect(page.locator("#rollout")).to_have_count(0)
    assert store.read(SHARED, skill, "SKILL.md").decode() == edited.replace("\r\n", "\n")
    page.goto(f"/agents/{AGENT}/users/bob/")
    expect(page.locator(f"tr[data-skill={skill}] td.gets")).to_contain_text("live")
    page.goto(f"/agents/{AGENT}/activity?skill={skill}")
    expect(page.locator("#activity tbody tr").nth(0)).to_contain_text("promote")
    expect(page.locator("#activity tbody tr").nth(1)).to_contain_text("widen")
    expect(page.locator("#activity tbody tr").nth(2)).to_contain_text("stage")
    expect(page.locator("#activity td.actor").nth(2)).to_have_text(OPERATOR)


def test_a_combined_rule_is_said_in_words_and_its_cohort_listed(
    page: Page, store: skillfs.Store
) -> None:
    """'staging and 50 %, never u3' chosen in the canary panel: the skill's page says the rule
    in words and lists as getting the candidate exactly the known users whose buckets the
    rule takes, u3 never among them; aborted after, for the tests that follow."""
    skill = "code-reviewer"
    users = [f"u{i}" for i in range(10)]
    for u in users:  # users with a scope of their own: those the console knows
        store.publish(Scope.user(AGENT, u), "own", example_files("release-notes"), actor="seed")
    page.goto(f"/{SHARED.prefix}{skill}/files/SKILL.md")
    set_editor(page, editor_text(page).replace("# Code reviewer", "# Code reviewer (both)"))
    page.click("#canary-toggle")
    page.fill("#canary-envs", "staging")
    page.fill("#canary-percent", "50")
    page.select_option("#canary-match", "all")
    page.fill("#canary-excluded", "u3")
    page.press("#canary-excluded", "Enter")
    said = "workers in staging and 50 % of users, never u3"
    expect(page.locator(".flash.ok")).to_contain_text(f"as a canary for {said}")
    page.goto(f"/{SHARED.prefix}{skill}/")
    expect(page.locator("#rollout-rule")).to_have_text(said)
    m = store.manifest(SHARED, skill)
    assert m.candidate is not None
    cohort = [u for u in users if gets_candidate(m.candidate.rollout, SHARED, skill, u, "staging")]
    listed = page.locator("#rollout-users .chip").all_inner_texts()
    assert sorted(listed) == sorted(cohort) and "u3" not in listed and 0 < len(cohort) < 10
    page.click("#abort")
    expect(page.locator("#rollout")).to_have_count(0)


def test_review_queue_approves_one_draft_as_a_canary_and_rejects_another(
    page: Page, store: skillfs.Store
) -> None:
    text = store.read(SHARED, "sql-query-helper", "SKILL.md").decode()
    store.drafts.propose(
        SHARED,
        "sql-query-helper",
        {"SKILL.md": text.replace("# ", "# Reviewed: ", 1).encode()},
        options=skillfs.WriteOptions(actor="agent:support-bot/alice", message="clearer title"),
    )
    greeter = b"---\nname: greeter\ndescription: Greets people politely.\n---\n\nSay hi.\n"
    store.drafts.propose(
        ALICE,
        "greeter",
        {"SKILL.md": greeter},
        options=skillfs.WriteOptions(message="alice wants greetings"),
    )

    page.goto(f"/agents/{AGENT}/")
    page.click("a.btn >> text=Review queue")
    expect(page.locator("#drafts tr[data-draft]")).to_have_count(2)
    page.click("#drafts a.skill-link >> text=sql-query-helper")
    expect(page.locator("h1")).to_contain_text("Draft of sql-query-helper")
    expect(page.locator("table.diff").first).to_contain_text("Reviewed:")
    page.fill("#canary-users", "alice")
    page.click("#approve-canary")
    expect(page.locator(".flash.ok")).to_contain_text(
        "Approved the draft of sql-query-helper as a canary for users alice"
    )
    expect(page.locator("#drafts tr[data-draft]")).to_have_count(1)
    assert store.read(SHARED, "sql-query-helper", "SKILL.md").decode() == text  # live for others
    with skillfs.Skills(store, AGENT, "alice") as skills:
        assert "Reviewed:" in skills.snapshot().load("sql-query-helper")

    page.click("#drafts a.skill-link >> text=greeter")
    expect(page.locator("h1")).to_contain_text("Draft of greeter")
    page.fill("#reject-reason", "a shared greeter is coming")
    page.click("#reject")
    expect(page.locator(".flash.ok")).to_contain_text("Rejected the draft of greeter")
    expect(page.locator(".empty")).to_contain_text("No drafts waiting for review")
    assert "greeter" not in store.skills(ALICE)
    page.goto(f"/agents/{AGENT}/activity")
    first = page.locator("#activity tbody tr").first
    expect(first).to_contain_text("reject")
    expect(first.locator("td.actor")).to_have_text(OPERATOR)
    expect(first).to_contain_text("a shared greeter is coming")


def test_moving_a_label_reaches_a_pinned_worker_at_its_next_step(
    page: Page, store: skillfs.Store
) -> None:
    """docs/governance.md, "Labels and pins": the History page sets, moves and removes a
    label; a worker pinned to it (made before, in this process: another replica's place)
    is served the version the label names from its next step."""
    skill = "pinned-notes"
    for body in ("first", "second"):
        store.publish(SHARED, skill, {"SKILL.md": (
            f"---\nname: {skill}\ndescription: The {body} notes.\n---\n\nRead the {body}.\n"
        ).encode()}, actor="seed")  # fmt: skip

    def served() -> tuple[str, int | None, str | None]:
        info = next(s for s in worker.snapshot().skills if s.id == skill)
        return info.description, info.version, info.pinned

    with skillfs.Skills(store, AGENT, "bob", pins="stable") as worker:
        assert served() == ("The second notes.", 2, None)  # no label yet: the head
        page.goto(f"/{SHARED.prefix}{skill}/history")
        page.fill("#label-name", "stable")
        page.select_option("#label-version", "1")
        page.fill("#label-why", "the first passed review")
        page.click("#label-set")
        expect(page.locator(".flash.ok")).to_contain_text("stable now names version 1")
        expect(page.locator("table.history tbody tr").last.locator("td.labels")).to_contain_text(
            "stable"
        )
        assert served() == ("The first notes.", 1, "stable")
        held = store.manifest(SHARED, skill).labels["stable"]
        assert (held.version, held.actor) == (1, OPERATOR)

        page.fill("#label-name", "stable")  # moved to the live version (v3 now holds v2's files)
        page.select_option("#label-version", "3")
        page.click("#label-set")
        expect(page.locator(".flash.ok")).to_contain_text("stable now names version 3")
        assert served() == ("The second notes.", 3, "stable")

        page.fill("#label-name", "stable")
        page.click("#label-remove")
        expect(page.locator(".flash.ok")).to_contain_text("Removed stable")
        expect(page.locator("td.labels [data-label]")).to_have_count(0)
        assert served() == ("The second notes.", 5, None)

    page.goto(f"/agents/{AGENT}/activity?skill={skill}")
    expect(page.locator("#activity tbody tr").nth(0)).to_contain_text("unlabel")
    expect(page.locator("#activity tbody tr").nth(2)).to_contain_text("the first passed review")


def test_an_admin_names_a_scopes_host_profiles_and_its_saves_follow(
    page: Page, store: skillfs.Store
) -> None:
    """alice runs Claude Code: the operator accepts its profile in her scope, and an edit
    with `disable-model-invocation` saves there without "Save anyway"."""
    deploy = "---\nname: deploy\ndescription: Deploys.\n---\nDeploy.\n"
    store.publish(ALICE, "deploy", {"SKILL.md": deploy.encode()}, actor="seed")
    page.goto(f"/{ALICE.prefix}")
    expect(page.locator("#host-profiles")).to_contain_text("Host profiles: spec")
    page.check('input[name="profile:claude-code"]')
    page.fill("#profiles-why", "alice runs Claude Code")
    page.click("#profiles-save")
    expect(page.locator(".flash.ok")).to_contain_text("accepts spec, claude-code")
    expect(page.locator("#host-profiles")).to_contain_text("this scope's own, set by oncall-ana")
    expect(page.locator('input[name="profile:claude-code"]')).to_be_checked()

    page.goto(f"/{ALICE.prefix}deploy/")
    page.click("text=Edit SKILL.md")
    set_editor(page, deploy.replace("---\nDeploy", "disable-model-invocation: true\n---\nDeploy"))
    page.click("#save")
    expect(page.locator(".flash.ok")).to_contain_text("Saved SKILL.md")
    assert store.manifest(ALICE, "deploy").errors == []
    assert store.host_profiles.setting(ALICE).message == "alice runs Claude Code"
    page.goto(f"/{ALICE.prefix}")
    page.click("#profiles-clear")
    expect(page.locator(".flash.ok")).to_contain_text("the store's host profiles")
    assert not store.host_profiles.setting(ALICE).own

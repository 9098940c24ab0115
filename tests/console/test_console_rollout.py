"""Staged rollout in the console through ASGI calls (docs/console.md, "Staged rollout"): Save
as canary in the editor, the rollout panel (who gets it, widen, promote, abort), editing the
candidate, what each user gets on "What U sees", and bad input writing nothing. The browser
flow is in test_console_governance_browser.py."""

from __future__ import annotations

import re
from html import unescape

import skillfs
from skillfs.governance.rollout_rule import gets_candidate
from skillfs.model import File, Rollout, Scope
from tests.console.test_console import (
    AGENT,
    SHARED,
    Client,
    console_store,  # noqa: F401  (a fixture)
    md_text,
    skill_url,
)
from tests.console.test_console_governance import ops_client  # noqa: F401  (a fixture)
from tests.helpers import skill_md

SKILL = "code-reviewer"


def _save_canary(client: Client, text: str, version: int, **rule: str) -> object:
    form = {"path": "SKILL.md", "content": text, "base": str(version), "expected": str(version)}
    return client.post(skill_url(SKILL, "save"), {**form, "canary": "1", **rule})


def test_save_as_canary_stages_for_the_rule_only(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, SKILL)
    live_text = md_text(store, SKILL)
    edited = live_text.replace("# Code reviewer", "# Code reviewer (canary)")
    page = client.get(skill_url(SKILL, "files/SKILL.md"))
    assert 'id="canary-toggle"' in page.text and 'id="save-canary"' in page.text
    r = client.post(
        skill_url(SKILL, "save"),
        {
            "path": "SKILL.md",
            "content": edited,
            "base": str(m.version),
            "expected": str(m.version),
            "canary": "1",
            "users": "alice",
            "percent": "",
        },
    )
    assert r.status == 200 and "Staged SKILL.md as a canary for users alice" in r.text
    now = store.manifest(SHARED, SKILL)
    assert now.candidate is not None and now.candidate.rollout == Rollout(users=["alice"])
    assert now.candidate.actor == "ops" and now.actor == "ops"
    assert md_text(store, SKILL) == live_text  # everyone else keeps the live files
    assert 'id="rollout"' in r.text and "users alice" in r.text
    users = r.text.split('id="rollout-users"', 1)[1].split("</p>", 1)[0]
    # alice is only named in the rule (no scope of her own): not counted as a known user
    assert "No user has a scope here yet" in users
    assert 'without a scope here yet: <span class="chip">alice</span>' in users
    assert f"keeps the live files (those of version {m.version})" in r.text  # not the stage's
    assert "badge canary" in client.get("/" + SHARED.prefix).text

    alice = client.get("/agents/support-bot/users/alice/")
    assert re.search(r'data-skill="code-reviewer".*?candidate</span>', alice.text, re.S)
    bob = client.get("/agents/support-bot/users/bob/")
    assert "a candidate is staged for users alice, not for bob" in bob.text
    with skillfs.Skills(store, AGENT, "alice") as skills:
        assert "(canary)" in skills.snapshot().load(SKILL)
    diff = client.get(skill_url(SKILL, "diff?candidate=1"))
    assert diff.status == 200 and "+# Code reviewer (canary)" in unescape(diff.text)


def test_bad_rule_and_stale_version_write_nothing(client: Client, store: skillfs.Store) -> None:
    m = store.manifest(SHARED, SKILL)
    text = md_text(store, SKILL).replace("# Code reviewer", "# Code reviewer (mine)")
    for rule, said in [
        ({"percent": "150"}, "from 0 to 100"),
        ({"percent": "ten"}, "from 0 to 100"),
        ({"environments": "prod!"}, "environment"),
        ({"users": "_system"}, "user"),
    ]:
        r = _save_canary(client, text, m.version, **rule)
        assert r.status == 400 and "Not saved:" in r.text and said in unescape(r.text), rule
        assert "(mine)" in r.text  # the operator's text is still in the editor
        assert 'name="canary" value="1"' in r.text  # and the next save is a canary again
        assert store.manifest(SHARED, SKILL).version == m.version
    store.publish(SHARED, SKILL, {"SKILL.md": File(text.replace("(mine)", "(theirs)").encode())})
    r = _save_canary(client, text, m.version, users="alice")
    assert r.status == 409 and "Save as canary on top of version" in r.text
    assert store.manifest(SHARED, SKILL).candidate is None


def test_widen_promote_and_abort(client: Client, store: skillfs.Store) -> None:
    text = md_text(store, SKILL).replace("# Code reviewer", "# Code reviewer (next)")
    v = store.rollouts.stage(
        SHARED, SKILL, {"SKILL.md": File(text.encode())}, Rollout(fraction=0.1)
    ).version
    page = client.get(skill_url(SKILL) + "?who=carol")
    assert 'id="who-answer"' in page.text and "carol" in page.text
    assert "no part by environment" in page.text  # none named: nobody by it
    assert "every worker that declares one" not in page.text
    narrow = client.post(skill_url(SKILL, "widen"), {"expected": str(v), "percent": "5"})
    assert narrow.status == 409 and "keep everyone already in" in unescape(narrow.text)
    bad = client.post(skill_url(SKILL, "widen"), {"expected": str(v), "percent": "-1"})
    assert bad.status == 400 and "Nothing was written" in bad.text
    stale = client.post(skill_url(SKILL, "widen"), {"expected": str(v - 1), "percent": "50"})
    assert stale.status == 409
    assert store.manifest(SHARED, SKILL).version == v
    r = client.post(skill_url(SKILL, "widen"), {"expected": str(v), "percent": "50"})
    assert r.status == 200 and "Widened code-reviewer's candidate to 50 %" in unescape(r.text)
    m = store.manifest(SHARED, SKILL)
    assert m.candidate is not None and m.candidate.rollout.fraction == 0.5
    r = client.post(skill_url(SKILL, "promote"), {"expected": str(m.version)})
    assert r.status == 200 and "Promoted" in r.text
    assert md_text(store, SKILL) == text and store.manifest(SHARED, SKILL).candidate is None
    again = client.post(skill_url(SKILL, "promote"), {"expected": str(m.version + 1)})
    assert again.status == 409 and "no staged candidate" in again.text

    m = store.manifest(SHARED, SKILL)
    store.rollouts.stage(
        SHARED, SKILL, {"SKILL.md": File(b"x")}, Rollout(users=["alice"]), strict=False
    )
    r = client.post(skill_url(SKILL, "abort"), {"expected": str(m.version + 1)})
    assert r.status == 200 and "everyone sees the live version" in r.text
    assert store.manifest(SHARED, SKILL).candidate is None and md_text(store, SKILL) == text
    steps = [(e.action, e.actor == "ops") for e in store.governance.audit(AGENT, skill=SKILL)[:5]]
    assert steps == [  # the console's steps by the signed-in token, the store's by its own
        ("abort", True),
        ("stage", False),
        ("promote", True),
        ("widen", True),
        ("stage", False),
    ], steps


def test_edit_the_candidate_and_a_skill_never_live(client: Client, store: skillfs.Store) -> None:
    new = b"---\nname: greeter\ndescription: Greets people.\n---\n\nSay hi.\n"
    store.rollouts.stage(
        SHARED,
        "greeter",
        {"SKILL.md": File(new), "references/tone.md": File(b"warm\n")},
        Rollout(environments=["staging"]),
    )
    page = client.get(skill_url("greeter"))
    assert "Never live" in page.text and "tone.md" in page.text  # the candidate's files
    editor = client.get(skill_url("greeter", "files/SKILL.md"))
    assert "Say hi." in editor.text and 'name="candidate" value="1"' in editor.text
    assert "Save to the candidate" in editor.text and 'value="staging"' in editor.text
    assert "Edit the live version" not in editor.text  # there is none
    v = store.manifest(SHARED, "greeter").version
    bad_rule = {"path": "SKILL.md", "content": new.decode(), "base": str(v), "expected": str(v)}
    again = client.post(
        skill_url("greeter", "save"), {**bad_rule, "candidate": "1", "percent": "200"}
    )
    assert again.status == 400 and "Edit the live version" not in again.text  # nor here
    r = client.post(
        skill_url("greeter", "save"),
        {
            "path": "SKILL.md",
            "content": new.decode().replace("Say hi.", "Say hello."),
            "base": str(v),
            "expected": str(v),
            "candidate": "1",
            "environments": "staging, prod",
        },
    )
    assert r.status == 200 and "Staged SKILL.md as a canary for workers in prod, staging" in r.text
    m = store.manifest(SHARED, "greeter")
    assert m.candidate is not None and set(m.candidate.files) == {"SKILL.md", "references/tone.md"}
    assert not m.files  # still never live
    with skillfs.Skills(store, AGENT, "alice", environment="prod") as skills:
        assert "Say hello." in skills.snapshot().load("greeter")
    view = client.get("/agents/support-bot/users/alice/?environment=prod")
    assert 'data-skill="greeter"' in view.text
    assert 'data-skill="greeter"' not in client.get("/agents/support-bot/users/alice/").text
    assert client.get("/agents/support-bot/users/alice/?environment=no!").status == 400
    r = client.post(skill_url("greeter", "abort"), {"expected": str(m.version)})
    assert r.status == 200 and "it was never live, so it is gone" in r.text
    assert "greeter" not in store.manifests(SHARED)


def test_promote_and_approve_are_strict_unless_done_anyway(
    client: Client, store: skillfs.Store
) -> None:
    """As every console write (and the CLI's `promote`, `drafts approve`): a candidate or a
    draft that breaks the spec goes live only after **Do it anyway** (review: both went
    live at once, and the skill dropped out of every worker's view)."""
    broken = {"SKILL.md": File(b"no frontmatter at all\n")}
    store.rollouts.stage(SHARED, SKILL, broken, Rollout(users=["qa"]), strict=False)
    v = store.manifest(SHARED, SKILL).version
    r = client.post(skill_url(SKILL, "promote"), {"expected": str(v)})
    assert r.status == 422 and "candidate breaks the spec" in unescape(r.text)
    assert store.manifest(SHARED, SKILL).candidate is not None  # nothing promoted
    r = client.post(skill_url(SKILL, "promote"), {"expected": str(v), "force": "1"})
    assert r.status == 200 and "Promoted" in r.text
    assert store.manifest(SHARED, SKILL).errors

    store.drafts.propose(SHARED, "fresh", broken)
    approve = skill_url("_drafts/fresh", "approve")
    r = client.post(approve, {"expected": "1"})
    assert r.status == 422 and "The draft of fresh breaks the spec" in unescape(r.text)
    assert store.skills(SHARED).count("fresh") == 0
    r = client.post(approve, {"expected": "1", "force": "1"})
    assert r.status == 200 and "fresh" in store.skills(SHARED)


def test_a_never_live_skill_gets_its_upload_and_removal_on_its_candidate(
    client: Client, store: skillfs.Store
) -> None:
    """Outside (browser) testing: an upload to a skill only staged (its page shows the
    candidate) published a live version holding only the file, which every worker outside
    the rule then listed as a broken skill. It is staged again, under the same rule."""
    md = b"---\nname: fresh\ndescription: A new flow. Use when testing.\n---\nbody\n"
    store.rollouts.stage(SHARED, "fresh", {"SKILL.md": md}, Rollout(users=("alice",)))
    version = store.manifest(SHARED, "fresh").version
    r = client.upload(skill_url("fresh", "upload"), {"expected": str(version), "dir": ""},
                      {"file": ("notes.md", b"n")})  # fmt: skip
    assert r.status == 200, r.text
    m = store.manifest(SHARED, "fresh")
    assert m.files == {} and m.candidate is not None
    assert sorted(m.candidate.files) == ["SKILL.md", "notes.md"]
    assert m.candidate.rollout == Rollout(users=("alice",))
    r = client.post(skill_url("fresh", "rmfile"), {"path": "notes.md", "expected": str(m.version)})
    m = store.manifest(SHARED, "fresh")
    assert m.files == {} and m.candidate is not None and sorted(m.candidate.files) == ["SKILL.md"]
    bob = skillfs.Skills(store, AGENT, "bob").snapshot()
    assert "fresh" not in [s.id for s in bob.skills] and not bob.problems


def test_a_never_live_skill_is_listed_as_its_candidate(
    client: Client, store: skillfs.Store
) -> None:
    """The scope's table and the agent's list show a skill only staged as its page does: the
    candidate's description, files and size, marked as staged."""
    new = b"---\nname: greeter\ndescription: Greets people.\n---\n\nSay hi.\n"
    store.rollouts.stage(SHARED, "greeter", {"SKILL.md": File(new)}, Rollout(users=["alice"]))
    for url in ("/" + SHARED.prefix, "/" + SHARED.prefix + "?q=greets", "/agents/support-bot/"):
        row = re.search(
            r"<tr data-row[^>]*>\s*<td><a [^>]*>greeter</a>.*?</tr>", client.get(url).text, re.S
        )
        assert row is not None, url
        assert "Greets people." in row.group(0) and "staged only" in row.group(0), url
        if url.startswith("/" + SHARED.prefix):
            assert f"1 · {len(new)} B" in row.group(0)  # the scope's table has the Files column


def test_history_page_sets_moves_and_removes_a_label(client: Client, store: skillfs.Store) -> None:
    """docs/governance.md, "Labels and pins": the History page's label form, each step one
    commit by the signed-in token; bad input says what is wrong and writes nothing (the
    browser story is in test_console_governance_browser.py)."""
    v = store.manifest(SHARED, SKILL).version
    page = client.get(skill_url(SKILL, "history"))
    assert 'id="labels"' in page.text and 'name="label"' in page.text
    r = client.post(
        skill_url(SKILL, "label"),
        {"label": "stable", "version": str(v), "expected": str(v), "message": "known good"},
    )
    assert r.status == 200 and f"stable now names version {v} of {SKILL}" in unescape(r.text)
    assert 'data-label="stable"' in r.text
    m = store.manifest(SHARED, SKILL)
    assert (m.version, m.labels["stable"].version, m.actor, m.message) == (
        v + 1, v, "ops", "known good"
    )  # fmt: skip
    bad = [
        ({"label": "latest", "version": str(v)}, 400, "reserved"),
        ({"label": "no good", "version": str(v)}, 400, "invalid label"),
        ({"label": "beta", "version": "999"}, 404, "has no version 999"),
        ({"label": "stable", "version": str(v)}, 409, "nothing to move"),
        ({"label": "beta", "remove": "1"}, 404, "no label"),
    ]
    for form, status, text in bad:
        r = client.post(skill_url(SKILL, "label"), {**form, "expected": str(v + 1)})
        assert (r.status, text in unescape(r.text)) == (status, True), (form, r.status, r.text)
    stale = client.post(
        skill_url(SKILL, "label"), {"label": "beta", "version": str(v), "expected": str(v)}
    )
    assert stale.status == 409
    assert store.manifest(SHARED, SKILL).version == v + 1
    r = client.post(skill_url(SKILL, "label"), {"label": "stable", "remove": "1",
                                               "expected": str(v + 1)})  # fmt: skip
    assert r.status == 200 and "Removed stable" in r.text
    assert store.manifest(SHARED, SKILL).labels == {}


def test_a_combined_rule_in_words_and_its_cohort(client: Client, store: skillfs.Store) -> None:
    """ "staging and 50 %, never u3" typed in the editor's canary panel: the panel says it in
    words, and the known users it lists are exactly those the rule's buckets put in (in a
    staging worker); "does u… get it?" answers the same."""
    users = [f"u{i}" for i in range(12)]
    for u in users:  # users with a scope of their own: the ones the console knows
        store.publish(Scope.user(AGENT, u), "own", {"SKILL.md": File(skill_md("own"))})
    m = store.manifest(SHARED, SKILL)
    text = md_text(store, SKILL).replace("# Code reviewer", "# Code reviewer (both)")
    rule = {"environments": "staging", "percent": "50", "match": "all", "excluded": "u3"}
    r = _save_canary(client, text, m.version, **rule)
    said = "workers in staging and 50 % of users, never u3"
    assert r.status == 200 and f"Staged SKILL.md as a canary for {said}" in unescape(r.text)
    want = Rollout(environments=["staging"], fraction=0.5, match="all", excluded_users=["u3"])
    staged = store.manifest(SHARED, SKILL)
    assert staged.candidate is not None and staged.candidate.rollout == want
    page = client.get(skill_url(SKILL) + "?who=u5")
    assert f'<b id="rollout-rule">{said}</b>' in unescape(page.text)
    assert "all of the parts below" in page.text
    panel = page.text.split('id="rollout-users"', 1)[1].split("</p>", 1)[0]
    cohort = [u for u in users if gets_candidate(want, SHARED, SKILL, u, "staging")]
    listed = re.findall(r'<span class="chip">(u\d+)</span>', panel)
    assert sorted(listed) == sorted(cohort) and "u3" not in listed
    assert f"<b>{len(cohort)}</b> get" in panel and "in workers declaring staging" in panel
    answer = page.text.split('id="who-answer"', 1)[1].split("</span></span>", 1)[0]
    gets = "gets the candidate" if "u5" in cohort else "gets the live version"
    assert gets in answer and "in workers declaring staging" in answer
    editor = client.get(skill_url(SKILL, "files/SKILL.md") + "?candidate=1")
    assert '<option value="all" selected>' in editor.text and 'value="u3"' in editor.text


def test_promote_anyway_after_a_later_live_edit(client: Client, store: skillfs.Store) -> None:
    """A live save after staging: the panel says so, Promote is refused with a page naming
    the live version, its actor and time and offering Promote anyway, nothing written; the
    button promotes."""
    text = md_text(store, SKILL).replace("# Code reviewer", "# Code reviewer (next)")
    live = store.manifest(SHARED, SKILL).version
    store.rollouts.stage(SHARED, SKILL, {"SKILL.md": File(text.encode())}, Rollout(users=["a"]))
    head = client.get(skill_url(SKILL)).text.split("</h1>", 1)[0]  # the stage is not live:
    assert f"v{live + 1}</span>" in head and f"live files of v{live}" in head
    assert "candidate staged" in head
    hot = md_text(store, SKILL).replace("# Code reviewer", "# Code reviewer (hotfix)")
    v = store.publish(SHARED, SKILL, {"SKILL.md": File(hot.encode())}, actor="oncall").version
    page = client.get(skill_url(SKILL))
    assert f"Version {v} was saved live by oncall" in page.text
    r = client.post(skill_url(SKILL, "promote"), {"expected": str(v), "message": "ship it"})
    assert r.status == 409 and 'id="promote-anyway"' in r.text
    assert f"Version {v} of {SKILL} was saved live by <b>oncall</b>" in r.text
    assert 'name="anyway" value="1"' in r.text and 'value="ship it"' in r.text
    assert store.manifest(SHARED, SKILL).version == v and md_text(store, SKILL) == hot
    r = client.post(
        skill_url(SKILL, "promote"), {"expected": str(v), "anyway": "1", "message": "ship it"}
    )
    assert r.status == 200 and "Promoted" in r.text
    assert md_text(store, SKILL) == text
    assert store.governance.audit(AGENT, skill=SKILL)[0].message == "ship it"

"""The review queue through ASGI calls (docs/console.md, "Review queue"): drafts across an
agent's scopes, one draft against the live skill, approve and reject with a reason, and a
draft whose live skill or whose own version moved refused with nothing written. The browser
flow is in test_console_governance_browser.py."""

from __future__ import annotations

import re
from html import unescape

import skillfs
from skillfs.model import File, Scope
from skillfs.model.names import draft_entry
from tests.console.test_console import (
    AGENT,
    READER,
    SHARED,
    Client,
    _zip,
    console_store,  # noqa: F401  (a fixture)
    md_text,
)
from tests.console.test_console_governance import ops_client  # noqa: F401  (a fixture)

ALICE = Scope.user(AGENT, "alice")
GREETER = b"---\nname: greeter\ndescription: Greets people politely.\n---\n\nSay hi.\n"
QUEUE = "/agents/support-bot/drafts"


def _draft_url(scope: Scope, name: str, action: str = "") -> str:
    return "/" + scope.prefix + "_drafts/" + name + "/" + action


def test_queue_diff_approve_and_reject(client: Client, store: skillfs.Store) -> None:
    text = md_text(store, "code-reviewer").replace("# Code reviewer", "# Code reviewer, v2")
    store.drafts.propose(
        SHARED,
        "code-reviewer",
        {"SKILL.md": File(text.encode())},
        options=skillfs.WriteOptions(message="sharper"),
    )
    store.drafts.propose(
        ALICE,
        "greeter",
        {"SKILL.md": File(GREETER)},
        options=skillfs.WriteOptions(actor="agent:support-bot/alice"),
    )
    queue = client.get(QUEUE)
    assert queue.status == 200
    assert 'data-draft="code-reviewer"' in queue.text and 'data-draft="greeter"' in queue.text
    assert "agent:support-bot/alice" in queue.text and "new skill" in queue.text
    # the drafts are no skills: the scope pages do not list them
    assert "_drafts" not in client.get("/" + SHARED.prefix).text
    assert "greeter" not in client.get("/" + ALICE.prefix).text

    page = client.get(_draft_url(SHARED, "code-reviewer"))
    assert page.status == 200 and "+# Code reviewer, v2" in unescape(page.text)
    assert "against the live" in page.text and 'id="approve"' in page.text
    assert "must equal" not in page.text  # checked against code-reviewer, not _drafts/...
    v = store.manifest(SHARED, draft_entry("code-reviewer")).version
    r = client.post(_draft_url(SHARED, "code-reviewer", "approve"), {"expected": str(v)})
    assert r.status == 200 and "Approved the draft of code-reviewer: it is live" in r.text
    assert md_text(store, "code-reviewer") == text
    assert 'data-draft="code-reviewer"' not in r.text  # back on the queue, without it
    approved = next(e for e in store.governance.audit(AGENT) if e.action == "approve")
    assert approved.actor == "ops"

    g = store.manifest(ALICE, draft_entry("greeter")).version
    r = client.post(
        _draft_url(ALICE, "greeter", "reject"), {"expected": str(g), "message": "we have one"}
    )
    assert r.status == 200 and "Rejected the draft of greeter: we have one" in r.text
    assert "No drafts waiting for review" in r.text and "greeter" not in store.skills(ALICE)
    gone = client.get(_draft_url(ALICE, "greeter"))
    assert gone.status == 404 and "approved or rejected already" in gone.text
    rejected = next(e for e in store.governance.audit(AGENT) if e.action == "reject")
    assert rejected.actor == "ops" and rejected.message == "we have one"
    activity = client.get("/agents/support-bot/activity")
    assert '<span class="chip">draft</span>' in activity.text


def test_a_moved_draft_or_live_skill_writes_nothing(client: Client, store: skillfs.Store) -> None:
    text = md_text(store, "release-notes")
    store.drafts.propose(
        SHARED, "release-notes", {"SKILL.md": File((text + "\nDraft.\n").encode())}
    )
    store.publish(SHARED, "release-notes", {"SKILL.md": File((text + "\nLive.\n").encode())})
    queue = client.get(QUEUE)
    assert ">stale</span>" in queue.text
    page = client.get(_draft_url(SHARED, "release-notes"))
    assert 'id="stale"' in page.text and 'id="approve" disabled' in page.text
    v = store.manifest(SHARED, draft_entry("release-notes")).version
    r = client.post(_draft_url(SHARED, "release-notes", "approve"), {"expected": str(v)})
    assert r.status == 409 and "Nothing was written" in r.text
    assert md_text(store, "release-notes").endswith("Live.\n")
    assert store.manifest(SHARED, draft_entry("release-notes")).version == v

    store.drafts.propose(ALICE, "greeter", {"SKILL.md": File(GREETER)})
    store.drafts.propose(ALICE, "greeter", {"SKILL.md": File(GREETER + b"More.\n")})  # v2 meanwhile
    r = client.post(_draft_url(ALICE, "greeter", "approve"), {"expected": "1"})
    assert r.status == 409 and "greeter" not in store.skills(ALICE)
    r = client.post(_draft_url(ALICE, "greeter", "reject"), {"expected": "1", "message": "x"})
    assert r.status == 409 and store.manifest(ALICE, draft_entry("greeter")).version == 2


def test_a_reader_sees_the_queue_but_cannot_decide(client: Client, store: skillfs.Store) -> None:
    store.drafts.propose(SHARED, "greeter", {"SKILL.md": File(GREETER)})
    reader = Client(client.app)
    reader.sign_in(READER)
    assert 'data-draft="greeter"' in reader.get(QUEUE).text
    page = reader.get(_draft_url(SHARED, "greeter"))
    assert page.status == 200 and 'id="decide"' not in page.text
    r = reader.post(_draft_url(SHARED, "greeter", "approve"), {"expected": "1"})
    assert r.status == 403 and "greeter" not in store.skills(SHARED)
    assert client.get("/agents/support-bot/shared/skills/_drafts/no-such/").status == 404


def test_approve_as_canary(client: Client, store: skillfs.Store) -> None:
    text = md_text(store, "code-reviewer")
    store.drafts.propose(
        SHARED, "code-reviewer", {"SKILL.md": File(text.replace("# C", "# Canary C", 1).encode())}
    )
    v = store.manifest(SHARED, draft_entry("code-reviewer")).version
    url = _draft_url(SHARED, "code-reviewer", "approve")
    bad = client.post(url, {"expected": str(v), "canary": "1", "percent": "101"})
    assert bad.status == 400 and "from 0 to 100" in unescape(bad.text)
    assert store.manifest(SHARED, draft_entry("code-reviewer")).version == v  # still a draft
    r = client.post(url, {"expected": str(v), "canary": "1", "users": "alice", "percent": "10"})
    assert r.status == 200 and "as a canary for users alice or 10 % of users" in r.text
    m = store.manifest(SHARED, "code-reviewer")
    assert m.candidate is not None
    assert m.candidate.rollout == skillfs.Rollout(users=["alice"], fraction=0.1)
    assert md_text(store, "code-reviewer") == text  # live for everyone else
    assert not [d for d in store.drafts.list(SHARED) if d.name == "code-reviewer"]
    with skillfs.Skills(store, AGENT, "alice") as skills:
        assert "# Canary C" in skills.snapshot().load("code-reviewer")


def test_approve_a_users_draft_into_the_shared_scope(client: Client, store: skillfs.Store) -> None:
    store.drafts.propose(
        ALICE,
        "greeter",
        {"SKILL.md": File(GREETER)},
        options=skillfs.WriteOptions(actor="agent:support-bot/alice"),
    )
    page = client.get(_draft_url(ALICE, "greeter"))
    assert 'name="into" value="shared"' in page.text
    # one checkbox for both ways to approve, and a heading over each column of the decision
    assert page.text.count('name="into"') == 1
    headings = re.findall(r"<h3>([^<]+)</h3>", page.text.split('id="decide"')[1])
    assert headings == ["Approve", "Approve as canary", "Reject"]
    store.drafts.propose(SHARED, "other", {"SKILL.md": File(GREETER.replace(b"greeter", b"other"))})
    bad = client.post(_draft_url(SHARED, "other", "approve"), {"expected": "1", "into": "shared"})
    assert bad.status == 400 and "other" not in store.skills(SHARED)
    r = client.post(_draft_url(ALICE, "greeter", "approve"), {"expected": "1", "into": "shared"})
    assert r.status == 200 and "it is live in support-bot · shared" in unescape(r.text)
    assert "greeter" in store.skills(SHARED) and "greeter" not in store.skills(ALICE)
    assert not [d for d in store.drafts.list(ALICE) if d.name == "greeter"]


def test_a_users_drafts_are_not_counted_as_the_users_own_skills(
    client: Client, store: skillfs.Store
) -> None:
    """The worker page counts the user's own skills: a draft waiting in the user's scope
    (`_drafts/<name>`) is on the review queue, not one of them."""
    store.publish(ALICE, "notes", {"SKILL.md": File(GREETER.replace(b"greeter", b"notes"))})
    store.drafts.propose(
        ALICE,
        "greeter",
        {"SKILL.md": File(GREETER)},
        options=skillfs.WriteOptions(actor="agent:support-bot/alice"),
    )
    page = client.get("/agents/support-bot/users/alice")
    assert page.status == 200
    assert "alice’s own skills (1)" in unescape(page.text)


def test_a_draft_is_compared_with_live_files_and_with_the_shared_skill_it_would_replace(
    client: Client, store: skillfs.Store
) -> None:
    """A user's hiding entry (disabled, no files) or a tombstone is no live version to compare
    a draft with; a user's draft that may go into the shared skills shows what it replaces."""
    store.governance.disable(ALICE, "release-notes", "not for alice")  # alice's hiding entry, v1
    md = md_text(store, "release-notes").replace("# Release", "# Draft release", 1)
    store.drafts.propose(ALICE, "release-notes", {"SKILL.md": File(md.encode())})
    page = unescape(client.get(_draft_url(ALICE, "release-notes")).text)
    assert "against the live" not in page and "keeps live v" not in page
    assert "a new skill: nothing of this name is live here" in page and 'id="hiding"' in page
    shared = store.manifest(SHARED, "release-notes")
    assert f"replaces shared v{shared.version} (3 files)" in page
    assert f"Changes against shared v{shared.version}" in page
    assert "references/style-guide.md" in page.split('id="against-shared"')[1]  # removed
    # a tombstone is no live skill either; no shared skill of that name is said so
    store.publish(ALICE, "greeter", {"SKILL.md": File(GREETER)})
    store.delete(ALICE, "greeter")
    store.drafts.propose(ALICE, "greeter", {"SKILL.md": File(GREETER + b"Again.\n")})
    page = unescape(client.get(_draft_url(ALICE, "greeter")).text)
    assert "against the live" not in page and "a new skill" in page
    assert "No shared skill of that name" in page and "a new shared skill" in page


def test_approve_says_whose_workers_get_the_draft(client: Client, store: skillfs.Store) -> None:
    store.drafts.propose(ALICE, "greeter", {"SKILL.md": File(GREETER)})
    store.drafts.propose(SHARED, "greeter", {"SKILL.md": File(GREETER)})
    mine = unescape(client.get(_draft_url(ALICE, "greeter")).text)
    reach = mine.split('id="approve-reach">')[1].split("</p>")[0]
    assert "for alice's workers only" in reach and "every worker" not in reach.split(";")[0]
    assert "with the box ticked, for every worker of support-bot instead" in reach
    shared = unescape(client.get(_draft_url(SHARED, "greeter")).text)
    assert (
        "for every worker of support-bot (a user with a greeter of their own keeps it)"
        in (shared.split('id="approve-reach">')[1])
    )


def test_under_the_two_person_rule_the_console_proposes_and_approves(
    client: Client, store: skillfs.Store
) -> None:
    """docs/governance.md, "The two-person rule": the console's writes end in the Committer
    like every other surface's; a direct one is refused ("Review required", nothing written),
    and the signed-in operator approves another person's draft."""
    store.review.require(SHARED, options=skillfs.WriteOptions(actor="ana"))
    before = store.revision(AGENT)
    upload = client.upload(
        "/" + SHARED.prefix,
        {"op": "import"},
        {"archive": ("g.zip", _zip({"greeter/SKILL.md": GREETER}))},
    )
    text = unescape(upload.text)
    assert upload.status == 409 and "Review required" in text and "turned on by ana" in text
    assert "Nothing was written" in text and store.revision(AGENT) == before
    store.drafts.propose(
        SHARED, "greeter", {"SKILL.md": File(GREETER)}, options=skillfs.WriteOptions(actor="bob")
    )
    r = client.post(_draft_url(SHARED, "greeter", "approve"), {"expected": "1"})
    assert r.status == 200 and store.skills(SHARED).count("greeter") == 1
    activity = client.get("/agents/support-bot/activity")
    assert activity.status == 200 and "require-review" in activity.text
    assert 'two-person rule</a> <span class="chip">setting' in activity.text


def test_the_scope_page_shows_and_switches_the_two_person_rule(
    client: Client, store: skillfs.Store
) -> None:
    scope_url = "/" + SHARED.prefix
    page = client.get(scope_url).text
    assert 'id="review-rule"' in page and 'id="review-banner"' not in page
    reader = Client(client.app)
    reader.sign_in(READER)
    assert 'id="review-rule"' not in reader.get(scope_url).text  # no admin grant: no form
    refused = reader.post(scope_url, {"op": "review", "required": "1"})
    assert refused.status == 403 and not store.review.rule(SHARED).required
    on = client.post(scope_url, {"op": "review", "required": "1", "message": "SOC 2"})
    assert on.status == 200 and "now requires review" in on.text
    rule = store.review.rule(SHARED)
    assert rule.required and rule.message == "SOC 2"
    banner = reader.get(scope_url).text
    assert 'id="review-banner"' in banner and "Review required" in banner and "SOC 2" in banner
    assert "Lift the rule" not in banner  # a reader sees the rule, not the switch
    off = client.post(scope_url, {"op": "review", "required": "0"})
    assert off.status == 200 and not store.review.rule(SHARED).required
    assert client.post(scope_url, {"op": "review", "required": "x"}).status == 400

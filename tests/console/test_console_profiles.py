"""A scope's host profiles in the console (docs/console.md; docs/validation.md, "Host
profiles"): the scope page shows them to its readers, an admin changes them (audited, by the
signed-in token, with the form's message), and the console's own checks — the editor's
findings, New skill, a zip upload — judge a SKILL.md under them, as the store's commit does.
The browser flow is in test_console_governance_browser.py."""

from __future__ import annotations

import skillfs
from skillfs.model import Scope
from tests.console.test_console import (
    AGENT,
    READER,
    Client,
    console_store,  # noqa: F401  (a fixture)
    skill_url,
)
from tests.console.test_console_governance import ops_client  # noqa: F401  (a fixture)

ALICE = Scope.user(AGENT, "alice")
DEPLOY = b"---\nname: deploy\ndescription: Deploys.\ndisable-model-invocation: true\n---\nGo.\n"


def test_the_scope_page_shows_and_changes_the_host_profiles(
    client: Client, store: skillfs.Store
) -> None:
    scope_url = "/" + ALICE.prefix
    store.publish(ALICE, "deploy", {"SKILL.md": DEPLOY})
    page = client.get(scope_url).text
    assert "Host profiles: <b>spec</b>" in page and 'id="profiles-form"' in page
    assert "this scope names none" in page
    reader = Client(client.app)
    reader.sign_in(READER)
    read = reader.get(scope_url).text
    assert "Host profiles: <b>spec</b>" in read and 'id="profiles-form"' not in read
    refused = reader.post(scope_url, {"op": "profiles", "profile:claude-code": "1"})
    assert refused.status == 403 and not store.host_profiles.setting(ALICE).own

    # the editor's check under spec: the field is an error
    v = store.manifest(ALICE, "deploy").version
    form = {"path": "SKILL.md", "content": DEPLOY.decode() + "\nMore.\n", "base": str(v),
            "expected": str(v)}  # fmt: skip
    before = client.post(skill_url("deploy", "save", ALICE), form)
    assert before.status == 422 and "disable-model-invocation" in before.text

    on = client.post(
        scope_url, {"op": "profiles", "profile:claude-code": "1", "message": "Claude Code"}
    )
    assert on.status == 200 and "accepts spec, claude-code" in on.text
    setting = store.host_profiles.setting(ALICE)
    assert (setting.own, setting.actor, setting.message) == (True, "ops", "Claude Code")
    assert "this scope&#39;s own" in on.text or "this scope's own" in on.text
    saved = client.post(skill_url("deploy", "save", ALICE), form)
    assert saved.status == 200 and "Saved SKILL.md" in saved.text
    assert store.manifest(ALICE, "deploy").errors == []

    unknown = client.post(scope_url, {"op": "profiles", "profile:claud": "1"})
    assert unknown.status == 400 and "unknown host profile" in unknown.text
    cleared = client.post(scope_url, {"op": "profiles", "clear": "1"})
    assert cleared.status == 200 and "the store&#39;s host profiles" in cleared.text
    assert not store.host_profiles.setting(ALICE).own
    actions = [e.action for e in store.governance.audit(ALICE) if e.skill == "_settings/profiles"]
    assert actions == ["clear-profiles", "set-profiles"]

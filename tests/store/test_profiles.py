"""Host profiles at the commit (docs/validation.md, "Host profiles"): a store's profiles,
given to `open_store` or by `$SKILLFS_PROFILES`, decide which fields and names are errors in
every commit's findings; `spec` alone by default."""

from __future__ import annotations

import uuid

import pytest

import skillfs
from skillfs.errors import InvalidArgument

SHARED = skillfs.Scope.shared("support-bot")
CLAUDE = (
    b"---\nname: deploy\ndescription: Deploys.\ndisable-model-invocation: true\n"
    b"argument-hint: '[env]'\n---\nDeploy to $ARGUMENTS.\n"
)


def rules(store: skillfs.Store) -> list[str]:
    store.publish(SHARED, "deploy", {"SKILL.md": CLAUDE})
    return [f.rule for f in store.manifest(SHARED, "deploy").errors]


def test_a_stores_profiles_decide_the_findings_of_its_commits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = f"memory://{uuid.uuid4().hex}"
    assert rules(skillfs.open_store(url)) == ["unknown-field", "unknown-field"]
    assert rules(skillfs.open_store(url, profiles=["claude-code"])) == []
    monkeypatch.setenv("SKILLFS_PROFILES", "saa, claude-code")
    store = skillfs.open_store(url)
    assert store.profiles.names == ("spec", "saa", "claude-code") and rules(store) == []


def test_an_unknown_profile_is_refused() -> None:
    with pytest.raises(InvalidArgument, match="unknown host profile 'claud': choose from spec"):
        skillfs.open_store("memory://", profiles=["claud"])

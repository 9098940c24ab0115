"""The rule of which host profiles a scope accepts (skillfs/store/scope_profiles.py;
docs/validation.md, "Host profiles"), on manifests alone."""

from __future__ import annotations

from skillfs.model import Manifest
from skillfs.spec.profiles import Profiles
from skillfs.store.scope_profiles import PROFILES, accepted

STORE = Profiles.of(["claude-code"])


def setting(names: list[str]) -> Manifest:
    return Manifest.empty(PROFILES).with_files({}, {"profiles": names}, (), None)


def test_the_scopes_setting_while_live_else_the_stores() -> None:
    assert accepted(None, STORE) == STORE  # never set
    assert accepted(setting(["spec"]), STORE).names == ("spec",)  # its own wins
    assert accepted(setting(["spec", "saa"]).tombstone(), STORE) == STORE  # cleared


def test_a_name_this_skillfs_does_not_know_is_left_out() -> None:
    """Written by a newer skillfs: judging under the rest beats refusing every write."""
    assert accepted(setting(["spec", "future-host", "saa"]), STORE).names == ("spec", "saa")

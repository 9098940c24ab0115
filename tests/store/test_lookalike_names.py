"""Look-alike skill names are refused at every surface (issue 28 §3, docs/security.md): a new
name that is not NFKC, that holds invisible (default-ignorable, format, bidi) characters or
Hangul fillers or surrounding spaces, or whose case-folded confusable skeleton (Unicode TR39)
equals another live entry's in its scope. One owner decides: the name check
(`skillfs.model.names`) and the Committer's rules (`skillfs.store.rules`), run again by a
skillfs server on a raw `Commit`. Names are never rewritten; twins stored before the rule keep
reading, and `skillfs check-names` lists them."""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest

import skillfs
from skillfs import Scope, Skills, Store
from skillfs.engines.base import CommitOp
from skillfs.errors import InvalidPath
from skillfs.fs import SkillFileSystem
from tests.runtime_helpers import md
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
CYRILLIC_A = "\u0430"  # looks like Latin 'a'
CAFE_NFC = unicodedata.normalize("NFC", "café")
CAFE_NFD = unicodedata.normalize("NFD", "café")

#: Names no new skill may take, whatever the scope holds, and what the error says.
BAD = {
    "nfd": (CAFE_NFD, "not in Unicode NFKC"),
    "compat": ("\uff50df", "not in Unicode NFKC"),  # fullwidth p
    "zero-width": ("pd\u200bf", "U+200B"),
    "joiner": ("pd\u200df", "U+200D"),
    "bom": ("\ufeffpdf", "U+FEFF"),
    "bidi-mark": ("pdf\u200e", "U+200E"),
    "hangul-filler": ("pdf\u3164", "U+3164"),
    "halfwidth-filler": ("\uffa0pdf", "U+FFA0"),
    "choseong-filler": ("pdf\u115f", "U+115F"),
    "jungseong-filler": ("pdf\u1160", "U+1160"),
    "soft-hyphen": ("pd\u00adf", "U+00AD"),
    "variation-selector": ("pdf\ufe0f", "U+FE0F"),
    "tag": ("pdf\U000e0041", "U+E0041"),
    "leading-space": (" pdf", "space"),
    "trailing-space": ("pdf ", "space"),
    "ideographic-space": ("pdf\u3000", "space"),
}


@pytest.fixture(params=["memory", "sqlite", "grpc"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s = skillfs.open_store(url_for(request, request.param, tmp_path))
    yield s
    s.close()


def skill(name: str, body: str = "") -> dict[str, bytes]:
    return {"SKILL.md": md(name, f"Does {name} things.", body)}


def counter(store: Store, scope: Scope = SHARED) -> int:
    rev = store.domain_revisions([scope.domain])[scope.domain]
    return rev.counter if rev is not None else 0


def fs_of(store: Store, tmp_path: Path, user: str = "alice") -> SkillFileSystem:
    return SkillFileSystem(
        store=store, agent_id=AGENT, user_id=user, base=str(tmp_path / "ws"),
        skip_instance_cache=True,
    )  # fmt: skip


def tools(store: Store) -> skillfs.Snapshot:
    return Skills(store, AGENT, "alice", skill_writes="live").snapshot()


def stored_before_the_rule(store: Store, scope: Scope, name: str) -> None:
    """A skill written the way an older skillfs could: through the engine, no rule run."""
    template = "template-for-twins"
    store.publish(scope, template, skill(template))
    m = store.manifest(scope, template)
    store.delete(scope, template)
    twin = m.model_copy(update={"skill": name, "version": 1})
    store.engine.commit(scope.domain, [CommitOp(scope=scope, manifest=twin, expect=0)])


# ---------------------------------------------------------------------------- every surface


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_new_name_that_hides_characters_is_refused(store: Store, case: str) -> None:
    name, says = BAD[case]
    before = counter(store)
    with pytest.raises(InvalidPath, match=re.escape(says)):
        store.publish(SHARED, name, skill(name))
    assert counter(store) == before
    assert name not in store.manifests(SHARED)


@pytest.mark.parametrize(
    "first, twin",
    [("pdf", "PDF"), ("api-docs", f"{CYRILLIC_A}pi-docs"), ("report", "rep\u03bfrt")],
    ids=["case", "cyrillic", "greek-omicron"],
)
def test_a_look_alike_of_a_live_skill_in_the_scope_is_refused(
    store: Store, first: str, twin: str
) -> None:
    store.publish(SHARED, first, skill(first))
    before = counter(store)
    with pytest.raises(InvalidPath, match=rf"looks like {first!r}.*shared:support-bot"):
        store.publish(SHARED, twin, skill(twin))
    assert counter(store) == before
    assert sorted(store.manifests(SHARED)) == [first]
    # the same name is the same skill, not a twin; another scope is another namespace
    store.publish(SHARED, first, skill(first, "v2"))
    store.publish(ALICE, twin, skill(twin))


def test_two_look_alikes_in_one_commit_are_refused(store: Store) -> None:
    with pytest.raises(InvalidPath, match="looks like"):
        store.commit(
            [skillfs.Put(SHARED, "pdf", skill("pdf")), skillfs.Put(SHARED, "Pdf", skill("Pdf"))]
        )
    assert store.manifests(SHARED) == {}


def test_a_deleted_skill_leaves_its_name_free(store: Store) -> None:
    store.publish(SHARED, "pdf", skill("pdf"))
    store.delete(SHARED, "pdf")
    store.publish(SHARED, "PDF", skill("PDF"))
    assert sorted(store.manifests(SHARED)) == ["PDF"]


@pytest.mark.parametrize("engine", ["redis", "etcd"])
def test_the_scopes_names_are_read_by_key_on_redis_and_etcd(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """`Engine.entry_names` lists keys alone; tombstones are left out by the rule."""
    with skillfs.open_store(url_for(request, engine, tmp_path)) as store:
        store.publish(SHARED, "pdf", skill("pdf"))
        store.publish(SHARED, "old", skill("old"))
        store.delete(SHARED, "old")
        assert sorted(store.engine.entry_names(SHARED) or []) == ["old", "pdf"]
        with pytest.raises(InvalidPath, match="looks like 'pdf'"):
            store.publish(SHARED, "PDF", skill("PDF"))
        store.publish(SHARED, "OLD", skill("OLD"))  # a deleted skill is no twin


def test_renaming_onto_a_look_alike_is_refused_but_fixing_a_case_is_not(store: Store) -> None:
    store.publish(SHARED, "pdf", skill("pdf"))
    store.publish(SHARED, "docs", skill("docs"))
    with pytest.raises(InvalidPath, match="looks like 'pdf'"):
        store.edits.rename(SHARED, "docs", "PDF")
    store.edits.rename(SHARED, "pdf", "PDF")  # its own old name is not a twin
    assert {k for k, m in store.manifests(SHARED).items() if not m.deleted} == {"PDF", "docs"}


def test_an_fsspec_write_is_refused(store: Store, tmp_path: Path) -> None:
    store.publish(ALICE, "pdf", skill("pdf"))
    fs = fs_of(store, tmp_path)
    with pytest.raises(InvalidPath, match="looks like 'pdf'"):
        fs.pipe_file("skills/PDF/SKILL.md", md("PDF"))
    with pytest.raises(InvalidPath, match=re.escape("U+200B")):
        fs.pipe_file("skills/no\u200bte/SKILL.md", md("note"))
    assert {k for k, m in store.manifests(ALICE).items() if not m.deleted} == {"pdf"}


def test_the_agents_skill_manage_and_propose_are_refused(store: Store) -> None:
    store.publish(ALICE, "api-docs", skill("api-docs"))
    snap = tools(store)
    twin = f"{CYRILLIC_A}pi-docs"  # lowercase letters: valid by the spec, a twin all the same
    created = snap.call_tool(
        "skill_manage", {"action": "create", "name": twin, "content": md(twin).decode()}
    )
    assert created.startswith("Error: skill_manage:") and "looks like 'api-docs'" in created
    proposed = snap.call_tool(
        "propose_skill", {"name": twin, "files": {"SKILL.md": md(twin).decode()}}
    )
    assert proposed.startswith("Error: propose_skill:") and "looks like 'api-docs'" in proposed
    hidden = snap.call_tool(
        "skill_manage",
        {"action": "create", "name": "pdf\u3164", "content": md("pdf\u3164").decode()},
    )
    assert hidden.startswith("Error: skill_manage:") and "U+3164" in hidden, hidden
    assert {k for k, m in store.manifests(ALICE).items() if not m.deleted} == {"api-docs"}


@pytest.mark.server
def test_a_raw_commit_to_a_server_is_held_to_the_same_rule(tmp_path: Path) -> None:
    """The client's Committer runs the rules only to fail early: a manifest built by hand and
    sent as a `Commit` is refused by the server."""
    from support.grpc_servers import ADMIN, in_process

    server = in_process(f"memory://names-{tmp_path.name}", tmp_path)
    try:
        direct = server.store
        direct.publish(SHARED, "pdf", skill("pdf"))
        client = skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN)
        try:
            m = client.manifest(SHARED, "pdf")
            for name, says in (("PDF", "looks like 'pdf'"), ("pd\u200bf", "U+200B")):
                forged = m.model_copy(update={"skill": name, "version": 1})
                with pytest.raises(InvalidPath, match=re.escape(says)):
                    client.engine.commit(
                        SHARED.domain, [CommitOp(scope=SHARED, manifest=forged, expect=0)]
                    )
        finally:
            client.close()
        assert sorted(direct.manifests(SHARED)) == ["pdf"]
    finally:
        server.stop(0)


# ---------------------------------------------------------------------------- stored before


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_twins_stored_before_the_rule_keep_reading_and_being_edited(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    with skillfs.open_store(url_for(request, engine, tmp_path)) as store:
        store.publish(SHARED, CAFE_NFC, skill(CAFE_NFC))
        stored_before_the_rule(store, SHARED, CAFE_NFD)
        stored_before_the_rule(store, SHARED, "pd\u200bf")
        live = {k for k, m in store.manifests(SHARED).items() if not m.deleted}
        assert {CAFE_NFC, CAFE_NFD, "pd\u200bf"} <= live
        store.publish(SHARED, CAFE_NFD, skill(CAFE_NFD, "edited"))  # an existing entry
        store.publish(SHARED, "pd\u200bf", skill("pdf", "edited"))
        with Skills(store, AGENT, "alice") as sk:
            assert {CAFE_NFC, CAFE_NFD, "pd\u200bf"} <= {s.id for s in sk.snapshot().skills}
        store.delete(SHARED, CAFE_NFD)  # deleted, its name is new again: refused
        with pytest.raises(InvalidPath, match="not in Unicode NFKC"):
            store.publish(SHARED, CAFE_NFD, skill(CAFE_NFD))
        with pytest.raises(InvalidPath, match=rf"looks like {CAFE_NFC!r}"):  # another twin
            store.publish(SHARED, "CAFÉ", skill("CAFÉ"))


# ---------------------------------------------------------------------------- across layers


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_across_layers_a_look_alike_shadows_like_an_equal_name(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    with skillfs.open_store(url_for(request, engine, tmp_path)) as store:
        store.publish(SHARED, "pdf", skill("pdf", "the operators' one"))
        store.publish(ALICE, "PDF", skill("PDF", "alice's one"))
        store.publish(ALICE, "notes", skill("notes"))
        with Skills(store, AGENT, "alice") as sk:
            snap = sk.snapshot()
        by_id = {s.id: s for s in snap.skills}
        assert set(by_id) == {"PDF", "notes"}
        assert by_id["PDF"].shadows == (str(SHARED),)
        hidden = [p for p in snap.problems if p.skill == "pdf"]
        assert [(p.source, p.findings[0].rule) for p in hidden] == [(str(SHARED), "look-alike")]
        assert "'PDF'" in hidden[0].findings[0].message
        with Skills(store, AGENT, "bob") as sk:  # bob has no twin: he sees the shared one
            assert {s.id for s in sk.snapshot().skills} == {"pdf"}


# ---------------------------------------------------------------------------- the check


@pytest.mark.parametrize("engine", ["memory", "sqlite"])
def test_check_names_lists_twins_and_hidden_characters(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    from tests.cli_helpers import run

    url = url_for(request, engine, tmp_path)
    with skillfs.open_store(url) as store:
        store.publish(SHARED, "pdf", skill("pdf"))
        stored_before_the_rule(store, SHARED, "PDF")
        stored_before_the_rule(store, SHARED, "no\u200bte")
        store.publish(ALICE, "fine", skill("fine"))
    out = run(url, "check-names", "--json")
    assert out.exit_code == 1, (out.stdout, out.stderr)
    found = json.loads(out.stdout)
    assert {(f["scope"], f["name"], f["problem"]) for f in found} == {
        (str(SHARED), "PDF", "look-alike"),
        (str(SHARED), "pdf", "look-alike"),
        (str(SHARED), "no\u200bte", "hidden-characters"),
    }
    twin = next(f for f in found if f["name"] == "PDF")
    assert twin["twins"] == ["pdf"]
    text = run(url, "check-names", "--scope", str(ALICE))
    assert text.exit_code == 0, (text.stdout, text.stderr)
    assert "no look-alike" in text.stdout

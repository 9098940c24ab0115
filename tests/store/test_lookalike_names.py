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
import threading
import unicodedata
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import skillfs
from skillfs import Scope, Skills, Store
from skillfs.engines.base import CommitOp, Engine
from skillfs.errors import InvalidPath
from skillfs.fs import SkillFileSystem
from tests.runtime_helpers import md
from tests.stores import url_for

AGENT = "support-bot"
SHARED = Scope.shared(AGENT)
ALICE = Scope.user(AGENT, "alice")
CYRILLIC_A = "\u0430"  # looks like Latin 'a'
CYRILLIC_ER = "\u0440"  # looks like Latin 'p'
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


def test_a_scopes_settings_take_no_name(store: Store) -> None:
    """`_settings/review` and `_settings/profiles` are the scope's settings, not names: a skill
    may be called `Review` (before, a live review rule made it a twin of 'review')."""
    store.review.require(ALICE)
    store.host_profiles.accept(ALICE, ["claude-code"])
    for name in ("Review", "Profiles", "Names"):
        store.drafts.propose(ALICE, name, skill(name))
    assert sorted(d.name for d in store.drafts.list(ALICE)) == ["Names", "Profiles", "Review"]


@pytest.mark.parametrize("engine", ["redis", "etcd"])
def test_the_scopes_names_are_read_by_key_on_redis_and_etcd(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """`Engine.entry_names` lists keys alone; tombstones are left out by the rule."""
    with skillfs.open_store(url_for(request, engine, tmp_path)) as store:
        store.publish(SHARED, "pdf", skill("pdf"))
        store.publish(SHARED, "old", skill("old"))
        store.delete(SHARED, "old")
        names = ["_settings/names", "old", "pdf"]  # the register: store.name_register
        assert sorted(store.engine.entry_names(SHARED) or []) == names
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


# ---------------------------------------------------------------------------- at one instant


class Gate:
    """Holds the first `parties` reads of a scope's names until all of them have read: that
    many writers read the names at the same instant, before any of them commits."""

    def __init__(self, parties: int) -> None:
        self.barrier = threading.Barrier(parties, timeout=10)
        self.left = parties
        self.lock = threading.Lock()

    def wait(self) -> None:
        with self.lock:
            held = self.left > 0
            self.left -= held
        if held:
            self.barrier.wait()


def held_at(gate: Gate, engine: Engine) -> None:
    """Make `engine` (the one under a store's file tables) a subclass whose name read
    (`Engine.entry_names`, what the Committer's name rule reads) waits at `gate` once read."""
    inner = getattr(engine, "inner", engine)
    base = type(inner)
    if getattr(base, "gate", None) is gate:  # memory:// stores of one name share an engine
        return

    class Held(base):  # type: ignore[valid-type, misc]
        def entry_names(self, scope: Scope) -> list[str] | None:
            names = super().entry_names(scope)
            gate.wait()
            return names

    Held.gate = gate  # type: ignore[attr-defined]
    inner.__class__ = Held


def race(stores: Sequence[Store], names: Sequence[str]) -> list[object]:
    """Each store publishes one of `names` to the shared scope, all at once: each one's
    result or error."""
    with ThreadPoolExecutor(len(stores)) as pool:
        futures = [
            pool.submit(s.publish, SHARED, n, skill(n)) for s, n in zip(stores, names, strict=True)
        ]
        return [f.exception() or f.result() for f in futures]


def one_lands(outcomes: list[object], names: Sequence[str]) -> str:
    """The one name that landed; every other writer was refused, naming it as the twin."""
    pairs = list(zip(names, outcomes, strict=True))
    landed = [n for n, o in pairs if isinstance(o, skillfs.CommitResult)]
    assert len(landed) == 1, pairs
    for n, o in pairs:
        if n != landed[0]:
            assert isinstance(o, InvalidPath), (n, o)
            assert f"looks like {landed[0]!r}, already in {SHARED}" in str(o), o
    return landed[0]


TWINS = ["pdf", "PDF", f"{CYRILLIC_ER}df"]


@pytest.mark.parametrize("engine", ["memory", "sqlite", "redis", "etcd"])
def test_look_alikes_created_at_one_instant_do_not_both_land(
    request: pytest.FixtureRequest, tmp_path: Path, engine: str
) -> None:
    """Three writers on store objects of their own read the scope's names at the same
    instant (none there yet), then commit: one lands, the others are refused naming it."""
    url = url_for(request, engine, tmp_path)
    gate = Gate(len(TWINS))
    stores = [skillfs.open_store(url) for _ in TWINS]
    try:
        for s in stores:
            held_at(gate, s.engine)
        winner = one_lands(race(stores, TWINS), TWINS)
        assert stores[0].skills(SHARED) == [winner]
    finally:
        for s in stores:
            s.close()


@pytest.mark.server
def test_look_alikes_sent_by_two_grpc_clients_at_one_instant_do_not_both_land(
    tmp_path: Path,
) -> None:
    """Two `grpc://` clients of one server: the server reads the names for each `Commit` at
    the same instant, then commits; one lands, the other client is refused naming it."""
    from support.grpc_servers import ADMIN, in_process

    server = in_process(f"sqlite:///{tmp_path / 'skills.db'}", tmp_path, http=None)
    names = TWINS[:2]
    clients = [
        skillfs.open_store(f"grpc://127.0.0.1:{server.grpc_port}", token=ADMIN) for _ in names
    ]
    try:
        held_at(Gate(len(names)), server.store.engine)
        winner = one_lands(race(clients, names), names)
        assert server.store.skills(SHARED) == [winner]
    finally:
        for c in clients:
            c.close()
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

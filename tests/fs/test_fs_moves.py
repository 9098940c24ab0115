"""fsspec `mv` against other writers (docs/fsspec.md, "Moves"): a move reads its source in the
commit it makes, so an edit that lands first is carried, a second move of the same skill finds
nothing to move, an edit of a skill moved away is refused rather than leaving a skill without
its SKILL.md, and nothing read before a conflict is written after it. Each race is forced (the
other writer runs between the move's read and its commit) on every engine; two real processes
race 40 rounds in the slow tier."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import skillfs
from skillfs import Scope
from skillfs.errors import Conflict
from skillfs.fs import SkillFileSystem
from tests.helpers import skill_md

AGENT = "movers"
SHARED = Scope.shared(AGENT)
REPO = Path(__file__).resolve().parents[2]


def make_fs(url: str, tmp_path: Path) -> SkillFileSystem:
    return SkillFileSystem(
        store=url, agent_id=AGENT, base=str(tmp_path / "ws"), skip_instance_cache=True
    )


@pytest.fixture
def pair(store_url: str, tmp_path: Path) -> Iterator[tuple[SkillFileSystem, SkillFileSystem]]:
    """Two filesystems on one store, as two replicas have (memory: one engine)."""
    one, two = make_fs(store_url, tmp_path), make_fs(store_url, tmp_path)
    one.pipe({"skills/x/SKILL.md": skill_md("x"), "skills/x/notes.md": b"v1\n"})
    yield one, two
    one.store.close()
    two.store.close()


def before_commit(fs: SkillFileSystem, other: Callable[[], Any]) -> None:
    """Run `other` once, just before `fs`'s next commit reaches the engine (after its reads)."""
    engine = fs.store.engine
    real, ran = engine.commit, []

    def commit(
        domain: str, ops: list[Any], checks: Any = (), charges: Any = ()
    ) -> skillfs.Revision:
        if not ran:
            ran.append(True)
            other()
        return real(domain, ops, checks, charges)

    engine.commit = commit  # type: ignore[method-assign]


def test_a_move_carries_an_edit_that_lands_first(
    pair: tuple[SkillFileSystem, SkillFileSystem],
) -> None:
    mover, editor = pair
    before_commit(
        mover,
        lambda: editor.pipe({"skills/x/notes.md": b"edited\n", "skills/x/new.md": b"added\n"}),
    )
    mover.mv("skills/x", "skills/y")
    assert mover.store.skills(SHARED) == ["y"]
    assert mover.cat("skills/y/notes.md") == b"edited\n"
    assert mover.cat("skills/y/new.md") == b"added\n"
    assert b"name: y" in mover.cat("skills/y/SKILL.md")


def test_a_second_move_of_the_same_skill_finds_nothing(
    pair: tuple[SkillFileSystem, SkillFileSystem],
) -> None:
    mover, other = pair
    before_commit(mover, lambda: other.mv("skills/x", "skills/z"))
    with pytest.raises(FileNotFoundError, match="'x' does not exist"):
        mover.mv("skills/x", "skills/y")
    assert mover.store.skills(SHARED) == ["z"]
    assert sorted(mover.store.manifest(SHARED, "z").files) == ["SKILL.md", "notes.md"]


def test_an_edit_of_a_skill_moved_away_is_refused(
    pair: tuple[SkillFileSystem, SkillFileSystem],
) -> None:
    editor, mover = pair
    editor.ls("skills/x")  # read before the move
    before_commit(editor, lambda: mover.mv("skills/x", "skills/y"))
    with pytest.raises(Conflict, match="skills/x was deleted or moved"):
        editor.pipe_file("skills/x/notes.md", b"mine\n")
    assert editor.store.skills(SHARED) == ["y"]  # no skill x of one file, without SKILL.md
    assert editor.cat("skills/y/notes.md") == b"v1\n"


def test_a_move_into_another_skill_in_a_transaction_reads_its_source_again(
    pair: tuple[SkillFileSystem, SkillFileSystem],
) -> None:
    mover, editor = pair
    mover.pipe({"skills/z/SKILL.md": skill_md("z")})
    before_commit(mover, lambda: editor.pipe({"skills/x/notes.md": b"edited\n"}))
    with mover.transaction as tx:
        tx.message = "fold x into z"
        mover.mv("skills/x", "skills/z/", recursive=True)
    assert mover.store.skills(SHARED) == ["z"]
    assert mover.cat("skills/z/x/notes.md") == b"edited\n"  # not the v1 read before
    assert mover.store.manifest(SHARED, "z").message == "fold x into z"
    # a file added meanwhile would be left behind in a skill without SKILL.md: refused
    mover.pipe({"skills/w/SKILL.md": skill_md("w"), "skills/w/a.md": b"a"})
    before_commit(mover, lambda: editor.pipe({"skills/w/b.md": b"b"}))
    with pytest.raises(Conflict, match="files were added"), mover.transaction:
        mover.mv("skills/w", "skills/z/", recursive=True)
    assert sorted(mover.store.manifest(SHARED, "w").files) == ["SKILL.md", "a.md", "b.md"]


def test_a_filesystem_message_and_a_transactions(store_url: str, tmp_path: Path) -> None:
    fs = SkillFileSystem(
        store=store_url, agent_id=AGENT, base=str(tmp_path / "ws"), skip_instance_cache=True,
        message="synced from the repo",
    )  # fmt: skip
    fs.pipe({"skills/a/SKILL.md": skill_md("a")})
    with fs.transaction as tx:
        fs.pipe({"skills/b/SKILL.md": skill_md("b")})
        tx.message = "b for the billing team"
    fs.mv("skills/a", "skills/c")
    messages = {e.skill: e.message for e in fs.store.governance.audit(SHARED) if not e.version - 1}
    assert messages == {
        "a": "synced from the repo", "b": "b for the billing team", "c": "synced from the repo"
    }  # fmt: skip


# ---------------------------------------------------------------------------- two processes

ROUNDS = 40

WORKER = textwrap.dedent(
    """
    import sys, time
    from skillfs.errors import Conflict, SkillfsError
    from skillfs.fs import SkillFileSystem
    url, role, base, start = sys.argv[1:5]
    fs = SkillFileSystem(store=url, agent_id="movers", base=base, skip_instance_cache=True)
    names = {"mover": ("x", "y"), "other": ("x", "z")}.get(role)
    done = []
    for i in range(40):
        time.sleep(max(0.0, float(start) + i * 0.05 - time.time()))  # both act at each tick
        try:
            if role == "editor":
                with fs.transaction:  # read, change, write back: only if still there
                    where = next(n for n in ("x", "y") if fs.exists(f"skills/{n}/SKILL.md"))
                    text = fs.cat(f"skills/{where}/notes.md")
                    fs.pipe_file(f"skills/{where}/notes.md", text + f"edit {i}\\n".encode())
                done.append(f"edit {i}")
            else:
                here = next((n for n in names if fs.exists(f"skills/{n}/SKILL.md")), None)
                if here is not None:
                    there = names[1] if here == names[0] else names[0]
                    fs.mv(f"skills/{here}", f"skills/{there}")
                    done.append(f"{here}>{there}")
        except (FileNotFoundError, Conflict, StopIteration, SkillfsError):
            pass
        fs.invalidate_cache()
    print("\\n".join(done))
    """
)


def race(url: str, tmp_path: Path, roles: tuple[str, str]) -> list[str]:
    start = str(time.time() + 3.0)  # past both interpreters' start-up
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, role, str(tmp_path / role), start],
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for role in roles
    ]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
    return [line for out, _ in outs for line in out.splitlines() if line]


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_two_processes_move_and_edit_40_rounds(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from tests.stores import url_for

    url = url_for(request, engine, tmp_path)
    fs = make_fs(url, tmp_path)
    fs.pipe({"skills/x/SKILL.md": skill_md("x"), "skills/x/notes.md": b""})
    acknowledged = race(url, tmp_path, ("mover", "editor"))
    left = fs.store.skills(SHARED)
    assert len(left) == 1, left  # never two, never none
    held = fs.store.manifest(SHARED, left[0])
    assert "SKILL.md" in held.files
    notes = fs.cat(f"skills/{left[0]}/notes.md").decode().splitlines()
    edits = [line for line in acknowledged if line.startswith("edit")]
    assert edits, acknowledged  # the race ran
    assert [line for line in acknowledged if ">" in line], acknowledged  # and the mover moved
    assert [line for line in edits if line not in notes] == []  # no edit lost
    fs.store.close()


@pytest.mark.slow
@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_two_processes_move_one_skill_40_rounds(
    engine: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    from tests.stores import url_for

    url = url_for(request, engine, tmp_path)
    fs = make_fs(url, tmp_path)
    fs.pipe({"skills/x/SKILL.md": skill_md("x"), "skills/x/notes.md": b"keep\n"})
    moves = race(url, tmp_path, ("mover", "other"))
    assert moves, "no move was acknowledged: nothing raced"
    left = fs.store.skills(SHARED)
    assert len(left) == 1, left  # never duplicated
    for name in ("y", "z"):  # every move out of x acknowledged is one the store kept
        assert moves.count(f"x>{name}") - moves.count(f"{name}>x") == (left == [name]), moves
    assert sorted(fs.store.manifest(SHARED, left[0]).files) == ["SKILL.md", "notes.md"]
    fs.store.close()

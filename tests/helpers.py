"""Helpers every test module may use: a SKILL.md's bytes, an engine-level manifest, a wait,
a side entry as an older skillfs wrote it.

Helpers of one area build on these: tests/cli_helpers.py (running `skillfs`),
tests/runtime_helpers.py (workers' skills, a counting engine, a Git remote).
"""

from __future__ import annotations

import contextlib
import hashlib
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import skillfs
from skillfs.engines.base import CommitOp, Engine
from skillfs.model import FileEntry, Manifest, Scope

if TYPE_CHECKING:
    from skillfs.server.app import SkillfsServer

DESCRIPTION = "Does things. Use when testing."


def skill_md(
    name: str,
    body: str = "",
    *,
    description: str = DESCRIPTION,
    title: bool = False,
    quote: bool = False,
    end: str = "\n",
) -> bytes:
    """A SKILL.md: frontmatter with `name` and `description`, then `body` and `end`.

    `description` may say `{name}` (replaced by the name); `quote` YAML-quotes it, so it may
    hold any character; `title` puts a blank line and a `# name` heading before the body.
    """
    text = description.replace("{name}", name)
    if quote:
        text = "'" + text.replace("'", "''") + "'"
    heading = f"\n# {name}\n" if title else ""
    return f"---\nname: {name}\ndescription: {text}\n---\n{heading}{body}{end}".encode()


def skill_files(name: str, body: str = "body") -> dict[str, bytes]:
    """A skill's files: its SKILL.md and one reference file."""
    return {"SKILL.md": skill_md(name, body=body), "references/r.md": b"ref\n"}


def manifest(skill: str, version: int, deleted: bool = False, files: int = 0) -> Manifest:
    """A manifest of `version` with a fresh commit id and `files` entries (about 120 bytes of
    JSON each, no blobs behind them), for engine-level tests."""
    return Manifest(
        skill=skill,
        version=version,
        commit_id=uuid.uuid4().hex,
        committed_at=time.time(),
        deleted=deleted,
        files={
            f"references/file-{i:05d}.md": FileEntry(
                sha256=hashlib.sha256(f"{skill}{i}".encode()).hexdigest(),
                size=i,
                mode=0o644,
                mtime=1.0,
            )
            for i in range(files)
        },
    )


def wait_until(check: Callable[[], object], timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError("timed out")
        time.sleep(0.01)


def write_legacy(store: skillfs.Store, where: str, legacy: dict[str, bytes]) -> None:
    """A `_drafts` / `.archive` manifest of support-bot's shared scope as an older skillfs
    wrote it (files `<name>/...`): the engine's commit of a stored skill's file table under
    that name."""
    shared = Scope.shared("support-bot")
    src = store.publish(shared, "src", legacy)
    table = store.manifest(shared, "src").files
    cur = store.manifests(shared, [where]).get(where)
    m = store.manifest(shared, "src").model_copy(
        update={"skill": where, "version": (cur.version if cur else 0) + 1, "files": table}
    )
    store.engine.commit(shared.domain, [CommitOp(scope=shared, manifest=m, expect=m.version - 1)])
    store.delete(shared, "src", expected_version=src.version)


def raw_engine(store: skillfs.Store) -> Engine:
    """The engine itself, under the store's file tables (skillfs/store/tables.py): what a
    test that looks inside an engine (its client, its keys) holds; over grpc:// the store's
    engine."""
    return getattr(store.engine, "inner", store.engine)  # type: ignore[no-any-return]


@contextlib.contextmanager
def token_server(
    store: str, tmp_path: Path, tokens: Sequence[tuple[str, str, list[str]]]
) -> Iterator[SkillfsServer]:
    """A skillfs server on 127.0.0.1 over `store` with these (name, token, grants)."""
    from skillfs.auth import tokens_document
    from skillfs.server.app import ServerConfig, SkillfsServer

    path = tmp_path / "tokens.json"
    path.write_text(tokens_document(tokens, receipt_key="k"))
    config = ServerConfig(store=store, grpc="127.0.0.1:0", http="127.0.0.1:0", tokens=path)
    srv = SkillfsServer(config).start()
    try:
        yield srv
    finally:
        srv.stop(0)

"""A deepagents backend over one user's view (`pip install skillfs[deepagents]`).

```python
skills = Skills(store, "support-bot", "alice")
backend = CompositeBackend(default=StateBackend(), routes={"/skills/": SkillfsBackend(skills)})
agent = create_deep_agent(model=..., backend=backend, skills=["/skills/"])
agent.invoke(fresh_skills({"messages": [...]}), config)
```

Every call takes a fresh snapshot (one store round trip when nothing changed, docs/runtime.md),
so a file the agent reads is the current one at every step. deepagents' `SkillsMiddleware`
caches the skills list in the thread's state (langchain-ai/deepagents#5416); `fresh_skills`
clears that cache so the list is read again at the next invoke. Writes are commits to the
user's scope by `agent:<agentId>/<userId>` (docs/governance.md): a skill the user sees from a
lower layer is copied there first (the per-user override of docs/design.md §5).
"""

from __future__ import annotations

import posixpath
from collections.abc import Mapping
from typing import Any

from deepagents.backends.protocol import (
    FILE_NOT_FOUND,
    INVALID_PATH,
    IS_DIRECTORY,
    BackendProtocol,
    EditResult,
    FileDownloadResponse,
    FileInfo,
    FileUploadResponse,
    GlobResult,
    GrepResult,
    LsResult,
    ReadResult,
    WriteResult,
)
from deepagents.backends.utils import (
    compile_grep_include_glob,
    create_file_data,
    grep_matches_from_files,
    slice_read_response,
)

from skillfs.errors import SkillfsError
from skillfs.model import File, FileEntry, Scope
from skillfs.names import draft_entry, normalize_path
from skillfs.runtime import Skills, Snapshot
from skillfs.store_governance import agent_actor


def fresh_skills(state: Mapping[str, Any]) -> dict[str, Any]:
    """The invoke input with deepagents' cached skills list cleared, so `SkillsMiddleware`
    lists the skills again (an added or removed skill shows at this step)."""
    return {**state, "skills_metadata": None}


class SkillfsBackend(BackendProtocol):
    """The skills of `skills` (one agent and user) as files: `/<skill-id>/<path>`."""

    def __init__(self, skills: Skills, *, writable: bool = True) -> None:
        self.skills = skills
        self.writable = writable
        self.scope = Scope.user(skills.agent_id, skills.user_id)

    # ------------------------------------------------------------------ reading

    def _split(self, path: str) -> tuple[str, str]:
        """("skill", "path/inside") of `/skill/path/inside`; ("", "") for the root."""
        parts = posixpath.normpath("/" + path.strip()).strip("/")
        if not parts or parts == ".":
            return "", ""
        skill, _, rest = parts.partition("/")
        return skill, rest

    def _files(self, snap: Snapshot) -> dict[str, int]:
        """Every file of the view as `/skill/path` -> size."""
        return {f"/{s.id}/{p}": e.size for s in snap.skills for p, e in s.files.items()}

    def ls(self, path: str) -> LsResult:
        snap = self.skills.snapshot()
        prefix = "/" + "/".join(x for x in self._split(path) if x)
        prefix = prefix.rstrip("/") + "/"
        entries: dict[str, FileInfo] = {}
        for f, size in self._files(snap).items():
            if f.startswith(prefix):
                head, sep, _ = f[len(prefix) :].partition("/")
                if sep:
                    entries.setdefault(head, {"path": prefix + head + "/", "is_dir": True})
                else:
                    entries[head] = {"path": prefix + head, "is_dir": False, "size": size}
        if not entries and prefix != "/":
            return LsResult(error=f"directory not found: {path}; skills: {_ids(snap)}")
        return LsResult(entries=[entries[k] for k in sorted(entries)])

    def read(self, file_path: str, offset: int = 0, limit: int = 2000) -> ReadResult:
        snap = self.skills.snapshot()
        skill, rel = self._split(file_path)
        try:
            data = snap.read_bytes(skill, rel)
        except SkillfsError as exc:
            return ReadResult(error=str(exc))
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            return ReadResult(error=f"{file_path} is a binary file of {len(data)} bytes")
        return slice_read_response(create_file_data(text), offset, limit)

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        root = (path or "/").rstrip("/") + "/"
        match = compile_grep_include_glob(pattern)
        files = self._files(self.skills.snapshot())
        return GlobResult(
            matches=[
                {"path": f, "is_dir": False, "size": size}
                for f, size in sorted(files.items())
                if f.startswith(root) and match(f[len(root) :])
            ]
        )

    def grep(
        self,
        pattern: str,
        path: str | None = None,
        glob: str | None = None,
        *,
        max_count: int | None = None,
    ) -> GrepResult:
        snap = self.skills.snapshot()
        texts: dict[str, Any] = {}
        for s in snap.skills:
            for p in s.files:
                data = snap.read_bytes(s.id, p)
                if b"\0" not in data:
                    texts[f"/{s.id}/{p}"] = create_file_data(data.decode("utf-8", "replace"))
        return grep_matches_from_files(texts, pattern, path, glob, max_count=max_count)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        snap = self.skills.snapshot()
        out: list[FileDownloadResponse] = []
        for p in paths:
            skill, rel = self._split(p)
            try:
                out.append(FileDownloadResponse(path=p, content=snap.read_bytes(skill, rel)))
            except SkillfsError:
                is_dir = any(f.startswith(p.rstrip("/") + "/") for f in self._files(snap))
                out.append(
                    FileDownloadResponse(path=p, error=IS_DIRECTORY if is_dir else FILE_NOT_FOUND)
                )
        return out

    # ------------------------------------------------------------------ writing

    def _commit(self, file_path: str, change: Any) -> str | None:
        """Apply `change(old text or None) -> new text or bytes` to a file as one commit to
        the user's scope (with `Skills(..., skill_writes="draft")`: to the skill's draft
        there, docs/governance.md); the error text, or None."""
        if not self.writable:
            return f"{file_path}: the skills mount is read-only"
        skill, rel = self._split(file_path)
        store, actor = self.skills.store, agent_actor(self.skills.agent_id, self.skills.user_id)
        try:
            rel = normalize_path(rel)
            snap = self.skills.snapshot()
            base = snap.skill(skill) if any(s.id == skill for s in snap.skills) else None
            files: dict[str, File | bytes | FileEntry] = {}
            if base is not None:
                for p, e in base.files.items():  # by reference when the store holds the blob
                    files[p] = (
                        e
                        if base.scope is not None
                        else File(snap.read_bytes(skill, p), mode=e.mode)
                    )
            if self.skills.skill_writes == "draft":
                pending = store.manifests(self.scope, [draft_entry(skill)]).get(draft_entry(skill))
                if pending is not None:  # the next version of the agent's draft
                    files = dict(pending.files)
                held = files.get(rel)
                old = store.read_entry(held) if isinstance(held, FileEntry) else None
                if isinstance(held, File):  # a disk layer's file, read above
                    old = held.data
                files[rel] = _encoded(change(None if old is None else old.decode("utf-8")))
                expected = pending.version if pending is not None else 0
                based = pending.base_version if pending is not None else None  # as skill_writes
                store.propose(
                    self.scope, skill, files, expected_version=expected, actor=actor, based_on=based
                )
                return None
            old = snap.read_bytes(skill, rel) if base and rel in base.files else None
            files[rel] = _encoded(change(None if old is None else old.decode("utf-8")))
            mine = base is not None and base.scope == self.scope
            store.publish(
                self.scope, skill, files, base.version if mine and base else None, actor=actor
            )
        except (SkillfsError, ValueError) as exc:
            return str(exc)
        return None

    def write(self, file_path: str, content: str) -> WriteResult:
        error = self._commit(file_path, lambda old: content)
        return WriteResult(error=error) if error else WriteResult(path=file_path)

    def edit(
        self, file_path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> EditResult:
        counted: list[int] = []

        def change(old: str | None) -> str:
            if old is None:
                raise ValueError(f"{file_path}: no such file")
            n = old.count(old_string)
            if n == 0 or (n > 1 and not replace_all):
                raise ValueError(f"{file_path}: the text to replace occurs {n} times")
            counted.append(n if replace_all else 1)
            return old.replace(old_string, new_string, -1 if replace_all else 1)

        error = self._commit(file_path, change)
        if error:
            return EditResult(error=error)
        return EditResult(path=file_path, occurrences=counted[0])

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        out: list[FileUploadResponse] = []
        for path, data in files:
            error = self._commit(path, lambda old, d=data: d)
            out.append(FileUploadResponse(path=path, error=INVALID_PATH if error else None))
        return out


def _encoded(new: str | bytes) -> bytes:
    return new if isinstance(new, bytes) else new.encode("utf-8")


def _ids(snap: Snapshot) -> str:
    return ", ".join(s.id for s in snap.skills) or "(none)"

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
clears that cache so the list is read again at the next invoke. Writes are the agent-written
skills of docs/governance.md, under the same rules as the `skill_manage` tool: off unless
`Skills(..., skill_writes="draft" | "live")`, each a commit to the user's scope (a draft, or
live) by `agent:<agentId>/<userId>`; a skill the user sees from a lower layer is copied there
first (the per-user override of docs/design.md §5). A run's thread (`configurable.thread_id`)
is its session of the worker (docs/runtime.md, "Sessions").
"""

from __future__ import annotations

import base64
import posixpath
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from deepagents.backends.protocol import (
    FILE_NOT_FOUND,
    INVALID_PATH,
    IS_DIRECTORY,
    PERMISSION_DENIED,
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
    MAX_VIDEO_INPUT_BYTES,
    InvalidGlobPatternError,
    _get_backend_read_file_type,
    compile_grep_include_glob,
    create_file_data,
    grep_matches_from_files,
    slice_read_response,
)

from skillfs.errors import SkillfsError
from skillfs.integrations.langchain import thread_id
from skillfs.model import FileEntry
from skillfs.runtime import Skills, Snapshot
from skillfs.runtime.layers import Reader, SkillInfo


def fresh_skills(state: Mapping[str, Any]) -> dict[str, Any]:
    """The invoke input with deepagents' cached skills list cleared, so `SkillsMiddleware`
    lists the skills again (an added or removed skill shows at this step)."""
    return {**state, "skills_metadata": None}


class SkillfsBackend(BackendProtocol):
    """The skills of `skills` (one agent and user) as files: `/<skill-id>/<path>`."""

    def __init__(self, skills: Skills) -> None:
        self.skills = skills

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
        return {f"/{s.id}/{p}": e.size for s in snap.model_skills for p, e in s.files.items()}

    def ls(self, path: str) -> LsResult:
        try:
            snap = self.skills.snapshot(session=thread_id())
        except SkillfsError as exc:
            return LsResult(error=str(exc))
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
        skill, rel = self._split(file_path)
        try:
            data = _read(self.skills.snapshot(session=thread_id()), skill, rel)
        except SkillfsError as exc:
            return ReadResult(error=str(exc))
        # As deepagents' own backends read (FilesystemBackend, StoreBackend, BaseSandbox): a
        # type its classifier calls non-text (image, audio, video, PDF), or bytes that are not
        # UTF-8, come whole and base64-encoded; its read_file tool hands them to a multimodal
        # model as a content block. The classifier is private to deepagents, but it is the
        # one its tool routes on: a PDF read as text would be decoded there as base64.
        file_type = _get_backend_read_file_type(file_path)
        if file_type == "video" and len(data) > MAX_VIDEO_INPUT_BYTES:
            return ReadResult(
                error=f"Video file exceeds maximum input size of {MAX_VIDEO_INPUT_BYTES} bytes"
            )
        if file_type == "text":
            try:
                text = data.decode("utf-8")
            except UnicodeDecodeError:
                pass
            else:
                return slice_read_response(create_file_data(text), offset, limit)
        encoded = base64.standard_b64encode(data).decode("ascii")
        return ReadResult(file_data=create_file_data(encoded, encoding="base64"))

    def glob(self, pattern: str, path: str | None = None) -> GlobResult:
        root = (path or "/").rstrip("/") + "/"
        try:  # a refused pattern (`../*`) is an error result, as deepagents' own backends say
            match = compile_grep_include_glob(pattern)
        except InvalidGlobPatternError as exc:
            return GlobResult(error=str(exc))
        try:
            files = self._files(self.skills.snapshot(session=thread_id()))
        except SkillfsError as exc:
            return GlobResult(error=str(exc))
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
        texts: dict[str, Any] = {}
        try:
            snap = self.skills.snapshot(session=thread_id())
            data = _read_all(snap.model_skills)
            for s in snap.model_skills:
                for p, e in s.files.items():
                    blob = data[e.sha256]
                    if b"\0" not in blob:
                        texts[f"/{s.id}/{p}"] = create_file_data(blob.decode("utf-8", "replace"))
        except SkillfsError as exc:
            return GrepResult(error=str(exc))
        return grep_matches_from_files(texts, pattern, path, glob, max_count=max_count)

    def download_files(self, paths: list[str]) -> list[FileDownloadResponse]:
        try:
            snap = self.skills.snapshot(session=thread_id())
        except SkillfsError as exc:
            return [FileDownloadResponse(path=p, error=str(exc)) for p in paths]
        out: list[FileDownloadResponse] = []
        for p in paths:
            skill, rel = self._split(p)
            try:
                out.append(FileDownloadResponse(path=p, content=_read(snap, skill, rel)))
            except SkillfsError:
                is_dir = any(f.startswith(p.rstrip("/") + "/") for f in self._files(snap))
                out.append(
                    FileDownloadResponse(path=p, error=IS_DIRECTORY if is_dir else FILE_NOT_FOUND)
                )
        return out

    # ------------------------------------------------------------------ writing

    def _commit(self, file_path: str, change: Callable[[bytes | None], bytes]) -> str | None:
        """Set a file to `change(its bytes or None)` as the write tools write it
        (`Snapshot.change_file`: one commit by `agent:<agentId>/<userId>`, a draft or live as
        `Skills(..., skill_writes=)` says, refused when off); the error, or None."""
        skill, rel = self._split(file_path)
        try:
            text = self.skills.snapshot(session=thread_id()).change_file(skill, rel, change)
        except SkillfsError as exc:
            return str(exc)
        return text.removeprefix("Error: ") if text.startswith("Error:") else None

    def write(self, file_path: str, content: str) -> WriteResult:
        error = self._commit(file_path, lambda old: content.encode("utf-8"))
        return WriteResult(error=error) if error else WriteResult(path=file_path)

    def edit(
        self, file_path: str, old_string: str, new_string: str, replace_all: bool = False
    ) -> EditResult:
        counted: list[int] = []

        def change(data: bytes | None) -> bytes:
            if data is None:
                raise ValueError(f"{file_path}: no such file")
            old = data.decode("utf-8")
            n = old.count(old_string)
            if n == 0 or (n > 1 and not replace_all):
                raise ValueError(f"{file_path}: the text to replace occurs {n} times")
            counted.append(n if replace_all else 1)
            return old.replace(old_string, new_string, -1 if replace_all else 1).encode("utf-8")

        error = self._commit(file_path, change)
        if error:
            return EditResult(error=error)
        return EditResult(path=file_path, occurrences=counted[0])

    def upload_files(self, files: list[tuple[str, bytes]]) -> list[FileUploadResponse]:
        if self.skills.skill_writes is None:  # deepagents' name for a backend that is read-only
            return [FileUploadResponse(path=path, error=PERMISSION_DENIED) for path, _ in files]
        return [
            FileUploadResponse(
                path=path, error=INVALID_PATH if self._commit(path, _as(data)) else None
            )
            for path, data in files
        ]


def _as(data: bytes) -> Callable[[bytes | None], bytes]:
    """A change that sets a file to `data`, whatever it held."""
    return lambda old: data


def _read(snap: Snapshot, skill: str, path: str) -> bytes:
    """A file of a skill the model sees (the agent's reads are the model's: a skill only
    users invoke, `disable-model-invocation: true`, is not among them)."""
    return snap.read_bytes(snap.model_skill(skill).id, path)


def _read_all(skills: Sequence[SkillInfo]) -> dict[str, bytes]:
    """Every file of `skills` by SHA-256: one batched read per layer (`read_entries`), not
    a round trip per file."""
    layers: dict[int, tuple[Reader, list[FileEntry]]] = {}
    for s in skills:
        layers.setdefault(id(s.reader), (s.reader, []))[1].extend(s.files.values())
    data: dict[str, bytes] = {}
    for reader, entries in layers.values():
        data.update(reader.read_entries(entries))
    return data


def _ids(snap: Snapshot) -> str:
    return ", ".join(s.id for s in snap.model_skills) or "(none)"

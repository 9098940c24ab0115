"""Differences between two versions of a skill, file by file, for the history and conflict pages."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Literal

from skillfs.api import Store
from skillfs.model import FileEntry, Manifest

#: Text files larger than this are compared by hash only: a diff of them would not be read.
MAX_DIFF_BYTES = 512 * 1024

LineKind = Literal["hunk", "context", "add", "remove"]
Status = Literal["added", "removed", "modified", "mode"]


@dataclass(frozen=True)
class DiffLine:
    kind: LineKind
    old: int | None
    new: int | None
    text: str


@dataclass
class FileDiff:
    path: str
    status: Status
    old: FileEntry | None
    new: FileEntry | None
    binary: bool = False
    too_large: bool = False
    lines: list[DiffLine] = field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(line.kind == "add" for line in self.lines)

    @property
    def removed(self) -> int:
        return sum(line.kind == "remove" for line in self.lines)


def as_text(data: bytes) -> str | None:
    """The file as text when it is UTF-8 without NUL bytes; None means: treat as binary."""
    if b"\x00" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def diff_text(old: str, new: str, context: int = 3) -> list[DiffLine]:
    """Unified-diff hunks with the line numbers of both sides."""
    a, b = old.splitlines(), new.splitlines()
    out: list[DiffLine] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(context):
        first, last = group[0], group[-1]
        out.append(
            DiffLine(
                "hunk",
                None,
                None,
                f"@@ -{first[1] + 1},{last[2] - first[1]} +{first[3] + 1},{last[4] - first[3]} @@",
            )
        )
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                out += [DiffLine("context", i + 1, j1 + i - i1 + 1, a[i]) for i in range(i1, i2)]
                continue
            out += [DiffLine("remove", i + 1, None, a[i]) for i in range(i1, i2)]
            out += [DiffLine("add", None, j + 1, b[j]) for j in range(j1, j2)]
    return out


def diff_manifests(store: Store, old: Manifest | None, new: Manifest | None) -> list[FileDiff]:
    """Every file that differs between two manifests (`None`: the skill did not exist).

    Blobs are read in one batch; identical hashes are never read."""
    old_files = old.files if old else {}
    new_files = new.files if new else {}
    diffs: list[FileDiff] = []
    wanted: list[FileEntry] = []
    for path in sorted(set(old_files) | set(new_files)):
        a, b = old_files.get(path), new_files.get(path)
        if a is None:
            status: Status = "added"
        elif b is None:
            status = "removed"
        elif a.sha256 != b.sha256:
            status = "modified"
        elif a.mode != b.mode:
            status = "mode"
        else:
            continue
        d = FileDiff(path, status, a, b)
        if status != "mode":
            sides = [e for e in (a, b) if e is not None]
            if any(e.size > MAX_DIFF_BYTES for e in sides):
                d.too_large = True
            else:
                wanted += sides
        diffs.append(d)
    blobs = store.read_entries(wanted) if wanted else {}
    for d in diffs:
        if d.status == "mode" or d.too_large:
            continue
        texts = [as_text(blobs[e.sha256]) if e else "" for e in (d.old, d.new)]
        if texts[0] is None or texts[1] is None:
            d.binary = True
        else:
            d.lines = diff_text(texts[0], texts[1])
    return diffs

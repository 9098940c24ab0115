"""A snapshot as the MCP Skills extension shows it (SEP-2640, `io.modelcontextprotocol/skills`,
the ext-skills stable specification): `skill://` URIs, skill entries with every file's
SHA-256 digest and size, directory listings, and errors that name what exists.

Nothing here speaks the protocol: `skillfs/mcp/server.py` does. A URI is
`skill://<skill-id>/<path>`, each segment percent-encoded as FastMCP does, nested paths with
plain `/` (`skill://code-reviewer/references/style.md`); `%2F` is accepted too.
"""

from __future__ import annotations

import base64
import mimetypes
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from skillfs.model import Typed
from skillfs.runtime import SkillInfo, Snapshot
from skillfs.spec.skill_md import SKILL_MD

EXTENSION = "io.modelcontextprotocol/skills"
SCHEME = "skill://"
DIRECTORY_MIME = "inode/directory"
#: The specification's limits per skill: a larger one SHOULD NOT be served.
MAX_RESOURCES = 512
MAX_BYTES = 16 * 1024 * 1024
_NAME = re.compile(r"^(?!-)(?!.*--)[a-z0-9-]{1,64}(?<!-)$")


class BadUri(ValueError):
    """A URI that names nothing served; the message says what exists (an MCP -32602)."""


def uri(skill_id: str, path: str = "") -> str:
    """`skill://<skill-id>/<path>`; the skill's root directory without a path."""
    base = SCHEME + quote(skill_id, safe="")
    return f"{base}/{quote(path, safe='/')}" if path else base


def mime_type(path: str) -> str:
    if path.rsplit("/", 1)[-1] == SKILL_MD or path.endswith(".md"):
        return "text/markdown"
    return mimetypes.guess_type(path)[0] or "application/octet-stream"


def as_text(data: bytes) -> str | None:
    """The file as text when its bytes are UTF-8 without NUL (sent as `text`, else `blob`)."""
    if b"\0" in data:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return None


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def not_servable(s: SkillInfo, typed: Typed) -> str | None:
    """Why the extension's rules keep this skill out of `skills/list`, or None: checked on the
    typed reading (`typed`, the one served) as FastMCP's model checks an entry. Such a skill
    stays readable through `resources/read` and the tools."""
    fm = typed.frontmatter
    if fm is None:
        return typed.refused
    name, description = fm.get("name"), fm.get("description")
    if not isinstance(name, str) or not _NAME.match(name):
        return f"its name {name!r} is not 1-64 lowercase letters, digits and single hyphens"
    if name != s.id:
        return f"its name {name!r} differs from its directory {s.id!r}"
    if not isinstance(description, str) or not description.strip() or len(description) > 1024:
        return "its description is not 1-1024 characters"
    for key in ("license", "compatibility"):
        if key in fm and not isinstance(fm[key], str):
            return f"its {key!r} is not a string"
    tools = fm.get("allowed-tools")
    listed = isinstance(tools, list) and all(isinstance(t, str) for t in tools)
    if "allowed-tools" in fm and not (isinstance(tools, str) or listed):
        return "its 'allowed-tools' is not a string or a list of strings"
    if "compatibility" in fm and not 1 <= len(fm["compatibility"]) <= 500:
        return "its compatibility is not 1-500 characters"
    if "metadata" in fm and not isinstance(fm["metadata"], Mapping):  # null breaks a listing
        return "its metadata is not a mapping"
    if len(s.files) > MAX_RESOURCES or sum(e.size for e in s.files.values()) > MAX_BYTES:
        return f"it is over {MAX_RESOURCES} files or {MAX_BYTES} bytes"
    return None


def entry(s: SkillInfo, typed: Typed) -> dict[str, Any]:
    """The extension's `Skill`: the SKILL.md URI, the frontmatter as a YAML safe reader types
    it (what a host verifies against its own reading), every file with `sha256:` digest and
    size (the store records both at publish)."""
    return {
        "uri": uri(s.id, SKILL_MD),
        "frontmatter": typed.frontmatter,
        "resources": [
            {"uri": uri(s.id, p), "digest": f"sha256:{e.sha256}", "size": e.size}
            for p, e in sorted(s.files.items())
        ],
    }


def servable(snap: Snapshot) -> list[tuple[SkillInfo, Typed]]:
    """The skills `skills/list` carries, each with its typed reading."""
    typed = snap.typed()
    return [(s, typed[s.id]) for s in snap.skills if not_servable(s, typed[s.id]) is None]


def parse(snap: Snapshot, text: str) -> tuple[SkillInfo, str]:
    """The skill and the path (`""` for its root) a `skill://` URI names; BadUri otherwise,
    naming the skills or files that exist."""
    if not text.startswith(SCHEME):
        raise BadUri(f"{_echo(text)} is not a skill:// URI; skills: {_ids(snap)}")
    authority, _, rest = text[len(SCHEME) :].partition("/")
    skill_id = unquote(authority)
    s = next((x for x in snap.skills if x.id == skill_id), None)
    if s is None:
        raise BadUri(f"no skill {_echo(skill_id)} is served at {_echo(text)}; skills: {_ids(snap)}")
    path = unquote(rest).removesuffix("/")  # a directory may end with '/'; '//' is refused
    segments = path.split("/") if path else []
    if any(seg in ("", ".", "..") or "\\" in seg or "\0" in seg for seg in segments):
        raise BadUri(
            f"{_echo(text)} is not a path inside skill {s.id!r} ('.', '..', empty segments and "
            f"backslashes are refused); its files: {_files(s)}"
        )
    return s, path


def file_of(snap: Snapshot, text: str) -> tuple[SkillInfo, str]:
    """A file's skill and path; BadUri naming the skill's files when there is no such file."""
    s, path = parse(snap, text)
    if path not in s.files:
        what = "a directory" if path == "" or _is_dir(s, path) else "no file"
        raise BadUri(f"{_echo(text)} is {what} of skill {s.id!r}; its files: {_files(s)}")
    return s, path


def directory(snap: Snapshot, text: str) -> list[dict[str, Any]]:
    """`resources/directory/read`: the direct children of a skill directory, files with their
    MIME type and size, sub-directories as `inode/directory`."""
    s, path = parse(snap, text)
    if path and not _is_dir(s, path):
        raise BadUri(
            f"{_echo(text)} is not a directory of skill {s.id!r}; its directories: "
            + (", ".join(uri(s.id, d) for d in sorted(_dirs(s))) or uri(s.id))
        )
    prefix = f"{path}/" if path else ""
    children: dict[str, dict[str, Any]] = {}
    for p, e in sorted(s.files.items()):
        if not p.startswith(prefix):
            continue
        head, sep, _ = p[len(prefix) :].partition("/")
        child = prefix + head
        if sep:
            children.setdefault(
                child, {"uri": uri(s.id, child), "name": head, "mimeType": DIRECTORY_MIME}
            )
        else:
            children[child] = {
                "uri": uri(s.id, child),
                "name": head,
                "mimeType": mime_type(child),
                "size": e.size,
            }
    return [children[k] for k in sorted(children)]


#: How much of what a client sent an error message repeats.
ECHO_CHARS = 200


def _echo(text: str) -> str:
    """What the client sent, quoted, and cut where long: a 2 MB URI made a 2 MB error."""
    if len(text) <= ECHO_CHARS:
        return repr(text)
    return f"{text[:ECHO_CHARS]!r}… ({len(text)} characters)"


def page(items: Sequence[Any], cursor: str | None, size: int) -> tuple[list[Any], str | None]:
    """One page of `items` and the cursor of the next (opaque: an offset)."""
    start = 0
    if cursor:
        try:
            start = int(base64.urlsafe_b64decode(cursor.encode()).decode())
            if start < 0:
                raise ValueError(start)
        except ValueError as exc:
            raise BadUri(
                f"invalid cursor {_echo(cursor)}: pass the nextCursor of a result"
            ) from exc
    end = start + size
    more = base64.urlsafe_b64encode(str(end).encode()).decode() if end < len(items) else None
    return list(items[start:end]), more


def _dirs(s: SkillInfo) -> set[str]:
    return {p.rsplit("/", 1)[0] for p in s.files if "/" in p} | {
        "/".join(p.split("/")[:i]) for p in s.files for i in range(1, p.count("/"))
    }


def _is_dir(s: SkillInfo, path: str) -> bool:
    return any(p.startswith(path + "/") for p in s.files)


#: An error names at most this many skills or files (a message must stay deliverable).
MAX_LISTED = 50


def listing(items: list[str]) -> str:
    """`items` for an error message: the first MAX_LISTED, and how many more."""
    more = len(items) - MAX_LISTED
    return ", ".join(items[:MAX_LISTED]) + (f" and {more} more" if more > 0 else "") or "(none)"


def _ids(snap: Snapshot) -> str:
    return listing([s.id for s in snap.skills])


def _files(s: SkillInfo) -> str:
    return listing([uri(s.id, p) for p in sorted(s.files)])

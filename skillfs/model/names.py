"""Id and path rules of docs/design.md §1, checked before anything is written."""

from __future__ import annotations

import functools
import posixpath
import re
import unicodedata
from collections.abc import Iterable
from importlib import resources

from skillfs.errors import InvalidPath

_ID = re.compile(r"[A-Za-z0-9._@+-]{1,128}")
#: Lone surrogates excluded: no file system name holds them (nor does UTF-8).
_SKILL_DIR = re.compile(r"[^/\\\x00\ud800-\udfff]+")
_SURROGATE = re.compile(r"[\ud800-\udfff]")
#: What a new skill name or file path may not hold: control characters (C0, DEL, C1), line
#: and paragraph separators, bidirectional overrides and isolates. Both are shown in tables,
#: listings, links and the agent's prompt, where these break lines or reorder what is read.
_UNSHOWN = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
#: The caps of a new file path inside a skill (docs/security.md): its UTF-8 bytes and its
#: segments. Under any root a worker, `skillfs export` or fsspec `get` writes to, it stays
#: within the file system's PATH_MAX (4,096 bytes on Linux, 1,024 on macOS for the path
#: inside the skill's directory).
MAX_PATH_BYTES = 1024
MAX_PATH_DEPTH = 32


def check_id(kind: str, value: str) -> str:
    """An agent, user or market id: 1-128 of [A-Za-z0-9._@+-], not . or .., not starting with _."""
    if not isinstance(value, str) or not _ID.fullmatch(value):
        raise InvalidPath(
            f"invalid {kind} id {value!r}: use 1-128 characters of letters, digits and . _ @ + -"
        )
    if value in (".", "..") or value.startswith("_"):
        raise InvalidPath(
            f"invalid {kind} id {value!r}: '.', '..' and ids starting with '_' are reserved"
        )
    return value


def check_skill_name(value: str) -> str:
    """A skill directory: one path segment that every file system can hold (at most 255
    bytes, as a file path's segments). The spec's name rules are findings, not path errors."""
    if (
        not isinstance(value, str)
        or not _SKILL_DIR.fullmatch(value)
        or value in (".", "..")
        or len(value.encode()) > 255
    ):
        raise InvalidPath(
            f"invalid skill directory {value!r}: a skill is one directory name "
            "(no '/', '\\', NUL, '.' or '..', at most 255 bytes in UTF-8)"
        )
    return value


def is_hidden_dir(name: str) -> bool:
    """`_drafts/`, `.archive/` and the like are not skills (docs/design.md §1); nor is an
    entry inside them (`_drafts/<name>`)."""
    return name.startswith(("_", "."))


#: The directories of a scope that hold side entries, one per skill (docs/governance.md,
#: "Drafts and review", "Archive"): `_drafts/<name>`, `.archive/<name>`; and its settings,
#: `_settings/<name>` ("The two-person rule").
DRAFTS, ARCHIVE, SETTINGS = "_drafts", ".archive", "_settings"
SIDE_DIRS = (DRAFTS, ARCHIVE, SETTINGS)


def check_live_name(name: str) -> str:
    """A name a skill can be live under: a skill directory not starting with '_' or '.', with
    nothing that changes how it is shown. (A name stored before this rule is still read,
    renamed and deleted: `check_skill_name`.)"""
    check_skill_name(name)
    _refuse_unshown(f"invalid skill name {name!r}", name)
    if is_hidden_dir(name):
        raise InvalidPath(
            f"invalid skill name {name!r}: a name starting with '_' or '.' is a directory "
            "that holds no skill (docs/design.md §1); drafts and archived skills are named "
            "like the skill they become"
        )
    return name


def check_new_path(path: str) -> str:
    """A path a file can be written at: `normalize_path`, and nothing that changes how it is
    shown (a line break made a console link that no route matches). A file stored before
    this rule is still read, carried by edits and deleted."""
    norm = normalize_path(path)
    _refuse_unshown(f"invalid file path {path!r}", norm)
    over = path_over_caps(norm)
    if over is not None:
        raise InvalidPath(
            f"invalid file path {shown_path(norm)!r}: {over}; a path inside a skill is at most "
            f"{MAX_PATH_BYTES:,} bytes in UTF-8 and {MAX_PATH_DEPTH} segments deep, so every "
            "file system can hold it wherever the skill is written: use shorter names or "
            "fewer directories"
        )
    return norm


def path_over_caps(path: str) -> str | None:
    """What makes a normalized path longer or deeper than a new one may be (None: nothing).
    A path stored before the caps is still read, carried by edits and deleted; `skillfs
    check` lists it, and what writes skills to disk skips its skill."""
    size = len(path.encode("utf-8", "surrogateescape"))
    if size > MAX_PATH_BYTES:
        return f"it is {size:,} bytes long in UTF-8"
    depth = path.count("/") + 1
    if depth > MAX_PATH_DEPTH:
        return f"it is {depth} segments deep"
    return None


def unwritable(paths: Iterable[str]) -> str | None:
    """Why a skill holding `paths` cannot be written to disk (None: it can): its first path
    stored before the caps that is longer or deeper than a file system may hold. What writes
    skills to disk (materialize, export, fsspec `get`) skips such a skill and says this."""
    for path in sorted(paths):
        over = path_over_caps(path)
        if over is not None:
            return (
                f"file {shown_path(path)!r} cannot be written to disk ({over}); rename it "
                "(`skillfs check` lists every such path)"
            )
    return None


def shown_path(path: str, most: int = 80) -> str:
    """A path as an error or finding shows it: cut to its first `most` characters."""
    return path if len(path) <= most else f"{path[:most]}…"


def _refuse_unshown(what: str, value: str) -> None:
    unshown = _UNSHOWN.search(value)
    if unshown is not None:
        raise InvalidPath(
            f"{what}: it holds U+{ord(unshown.group()):04X}, a control character, line break "
            "or text-direction override, which would change how it reads in listings, links "
            "and prompts; use printable characters"
        )


#: Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties.txt): characters that show as
#: nothing, the Hangul fillers U+115F, U+1160, U+3164 and U+FFA0 among them. (Python's
#: `unicodedata` does not carry the property.)
_IGNORABLE = re.compile(
    "[\u00ad\u034f\u061c\u115f\u1160\u17b4\u17b5\u180b-\u180f\u200b-\u200f\u202a-\u202e"
    "\u2060-\u206f\u3164\ufe00-\ufe0f\ufeff\uffa0\ufff0-\ufff8\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0000-\U000e0fff]"
)
#: Bidi_Control's explicit formatting classes (embeddings, overrides, isolates).
_BIDI_CONTROLS = frozenset({"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI"})


def _invisible(c: str) -> bool:
    return (
        _IGNORABLE.match(c) is not None
        or unicodedata.category(c) == "Cf"
        or unicodedata.bidirectional(c) in _BIDI_CONTROLS
    )


def check_new_name(name: str) -> str:
    """A name a skill can be created under (docs/security.md, "Look-alike names"):
    `check_live_name`, and no `name_problem`. Never rewritten: a name is stored as written or
    refused. (A name stored before this rule is still read, edited, renamed and deleted.)"""
    check_live_name(name)
    problem = name_problem(name)
    if problem is not None:
        raise InvalidPath(f"invalid skill name {name!r}: {problem[1]}")
    return name


def name_problem(name: str) -> tuple[str, str] | None:
    """What makes a name show like another, as (rule, what to do): an invisible character
    (default-ignorable, format, bidi control, Hangul filler: `hidden-characters`), a
    surrounding space (`spaces`), a form other than Unicode NFKC (`not-nfkc`); None if none."""
    hidden = next((c for c in name if _invisible(c)), None)
    if hidden is not None:
        label = unicodedata.name(hidden, "unnamed")
        return "hidden-characters", (
            f"it holds U+{ord(hidden):04X} ({label}), which shows as nothing (an invisible, "
            "format or text-direction character, or a Hangul filler), so the name would "
            "read like another; remove it"
        )
    if name != name.strip():
        return "spaces", (
            "it starts or ends with a space, which listings and prompts do not show; write "
            f"it as {name.strip()!r}"
        )
    nfkc = unicodedata.normalize("NFKC", name)
    if nfkc != name:
        return "not-nfkc", (
            f"it is not in Unicode NFKC form, so it shows like {nfkc!r} yet is another name; "
            f"write it as {nfkc!r}"
        )
    return None


@functools.lru_cache(maxsize=1)
def _prototypes() -> dict[str, str]:
    """Unicode TR39's confusable prototypes (confusables.tsv, made by
    support/gen_confusables.py)."""
    table: dict[str, str] = {}
    text = resources.files("skillfs.model").joinpath("confusables.tsv").read_text("utf-8")
    for line in text.splitlines():
        if line and not line.startswith("#"):
            source, target = line.split("\t")
            table[chr(int(source, 16))] = "".join(chr(int(c, 16)) for c in target.split())
    return table


def name_key(name: str) -> str:
    """The case-folded confusable skeleton of a name (Unicode TR39, section 4): two names
    with one key look alike (`PDF` and `pdf`, Cyrillic `а` and Latin `a`, `café` in NFC and
    NFD). Used to compare names, never stored or shown. An ASCII name's key is one
    `str.translate` (each snapshot keys every name; a cache of them held ~500 B per skill)."""
    table, slow = _ascii_keys()
    if name.isascii() and slow.isdisjoint(name):
        return name.translate(table)
    return _skeleton(name)


@functools.lru_cache(maxsize=1)
def _ascii_keys() -> tuple[dict[int, str], frozenset[str]]:
    """Each ASCII character's key, which for an ASCII name is the concatenation of its
    characters' (casefold, TR39's mapping, NFD and casefold again leave ASCII as it is);
    and the characters whose key is not ASCII (`%`: `º/₀`), whose names take the whole way."""
    keys = {i: _skeleton(chr(i)) for i in range(128)}
    return keys, frozenset(chr(i) for i, key in keys.items() if not key.isascii())


@functools.lru_cache(maxsize=4096)
def _skeleton(name: str) -> str:
    text = _IGNORABLE.sub("", unicodedata.normalize("NFD", name.casefold()))
    table = _prototypes()
    skeleton = unicodedata.normalize("NFD", "".join(table.get(c, c) for c in text))
    return unicodedata.normalize("NFD", skeleton.casefold())


def look_alikes(names: Iterable[str]) -> dict[str, list[str]]:
    """Each name that looks like another of `names`, with those others (sorted)."""
    by_key: dict[str, set[str]] = {}
    for name in names:
        by_key.setdefault(name_key(name), set()).add(name)
    return {
        name: sorted(group - {name})
        for group in by_key.values()
        if len(group) > 1
        for name in sorted(group)
    }


def draft_entry(name: str) -> str:
    """The entry of the draft of skill `name` in its scope: `_drafts/<name>`."""
    return f"{DRAFTS}/{check_live_name(name)}"


def archive_entry(name: str) -> str:
    """The entry of archived skill `name` in its scope: `.archive/<name>`."""
    return f"{ARCHIVE}/{check_live_name(name)}"


def side_entry(entry: str) -> tuple[str, str] | None:
    """(side directory, name) of an entry `_drafts/<name>`, `.archive/<name>` or a setting
    `_settings/<name>`; None for a skill (or any other name)."""
    where, slash, name = entry.partition("/")
    return (where, name) if slash and where in SIDE_DIRS else None


def in_side(entry: str, where: str) -> bool:
    """Whether `entry` is an entry of the side directory `where` (`_drafts`, `.archive`)."""
    side = side_entry(entry)
    return side is not None and side[0] == where


def entry_name(entry: str) -> str:
    """The skill name an entry holds: `name` of `_drafts/<name>`, the entry itself otherwise
    (what its SKILL.md's `name` is checked against)."""
    side = side_entry(entry)
    return side[1] if side else entry


def check_entry(value: str) -> str:
    """What a store keeps one manifest for: a skill directory, or a side entry
    `_drafts/<name>` / `.archive/<name>` (docs/governance.md)."""
    if isinstance(value, str) and "/" in value:
        side = side_entry(value)
        if side is None:
            raise InvalidPath(
                f"invalid skill directory {value!r}: a skill is one directory name; only "
                f"drafts and archived skills have two ({DRAFTS}/<name>, {ARCHIVE}/<name>)"
            )
        check_live_name(side[1])
        return value
    return check_skill_name(value)


def normalize_path(path: str) -> str:
    """A path inside a skill: normalized POSIX, relative; no '..', NUL, backslash, empty segment."""
    if not isinstance(path, str) or not path:
        raise InvalidPath(
            "empty file path: name a file inside the skill, e.g. 'references/guide.md'"
        )
    if "\x00" in path:
        raise InvalidPath(f"file path {path!r} contains a NUL byte")
    if "\\" in path:
        raise InvalidPath(f"file path {path!r} contains a backslash: use '/' between directories")
    if path.startswith("/"):
        raise InvalidPath(
            f"file path {path!r} is absolute: give it relative to the skill directory"
        )
    parts = path.split("/")
    if any(p == "" for p in parts[:-1]) or parts[-1] == "":
        raise InvalidPath(f"file path {path!r} has an empty segment ('//' or a trailing '/')")
    if any(p == ".." for p in parts):
        raise InvalidPath(
            f"file path {path!r} contains '..': paths may not leave the skill directory"
        )
    if _SURROGATE.search(path):  # a file name that is not UTF-8 (read with surrogateescape)
        raise InvalidPath(
            f"file path {path!r} is not valid UTF-8 text (it holds a lone surrogate): "
            "rename the file to a UTF-8 name"
        )
    norm = posixpath.normpath(path)
    if norm in (".", "") or any(len(p.encode()) > 255 for p in parts):
        raise InvalidPath(
            f"file path {path!r} does not name a file (or a segment is over 255 bytes)"
        )
    return norm


@functools.lru_cache(maxsize=4096)
def check_domain(domain: str) -> str:
    """A revision domain, `agents/<id>` or `markets/<id>`, with its id checked (cached: the
    per-step revision check names the same few domains every time)."""
    kind, _, ident = domain.partition("/")
    if kind not in ("agents", "markets"):
        raise InvalidPath(f"invalid domain {domain!r}: use 'agents/AGENT' or 'markets/NAME'")
    check_id(kind[:-1], ident)
    return domain

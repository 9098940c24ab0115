"""Skill directories in and out of zip files.

An uploaded zip is untrusted: every member name goes through the store's path rules (no `..`,
absolute paths or backslashes, so nothing can escape its skill: zip-slip), symlinks are
refused, and sizes are counted while decompressing, never taken from the zip's own headers,
so a zip bomb stops at the limit.
"""

from __future__ import annotations

import io
import stat
import time
import zipfile
from dataclasses import dataclass

from skillfs.api import Store
from skillfs.console.filters import human_size
from skillfs.errors import InvalidPath, InvalidSkill, NotFound, TooLarge
from skillfs.model import File, Manifest
from skillfs.model.names import check_skill_name, is_hidden_dir, normalize_path
from skillfs.spec.skill_md import SKILL_MD, parse_skill_md
from skillfs.store.file_tables import renamed_skill_md

#: Entries that archivers add and that are never part of a skill.
_JUNK = ("__MACOSX/", ".DS_Store", "Thumbs.db")


@dataclass(frozen=True)
class ZipLimits:
    max_members: int = 10_000
    max_total_bytes: int = 256 * 1024 * 1024


def read_zip(data: bytes, limits: ZipLimits, name_hint: str = "") -> dict[str, dict[str, File]]:
    """The skills in a zip: `{skill: {path: File}}`.

    A zip with SKILL.md at its root is one skill, named `name_hint` or else by its frontmatter
    `name`; otherwise every top-level directory holding a SKILL.md is a skill, and the one
    such directory is named `name_hint` when given."""
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except zipfile.BadZipFile as exc:
        raise InvalidSkill(f"the upload is not a zip file ({exc})") from None
    members = [m for m in archive.infolist() if not m.is_dir() and not _junk(m.filename)]
    if len(members) > limits.max_members:
        raise TooLarge(
            f"the zip holds {len(members)} files, over the limit of {limits.max_members}"
        )
    files: dict[str, File] = {}
    budget = limits.max_total_bytes
    for member in members:
        if "\x00" in member.orig_filename:  # zipfile cuts the name there: another path
            raise InvalidPath(
                f"{member.orig_filename!r} in the zip holds a NUL character, which no file "
                "name may hold: rename it and zip again"
            )
        path = normalize_path(member.filename)
        mode = (member.external_attr >> 16) & 0o177777
        if stat.S_ISLNK(mode):
            raise InvalidPath(
                f"{member.filename!r} in the zip is a symbolic link: skills hold files"
            )
        content = _read_capped(archive, member, budget, limits.max_total_bytes)
        budget -= len(content)
        if path in files:
            raise InvalidPath(f"the zip holds {member.filename!r} twice")
        files[path] = File(content, mode=(mode & 0o777) or None)
    if SKILL_MD in files:
        name = name_hint or _frontmatter_name(files[SKILL_MD].data)
        if not name:
            raise InvalidSkill(
                "the zip has SKILL.md at its root but no skill name: give one, or put a "
                "'name' in its frontmatter"
            )
        return {check_skill_name(name): files}
    skills: dict[str, dict[str, File]] = {}
    for path, f in files.items():
        top, _, rest = path.partition("/")
        if rest and not is_hidden_dir(top):  # `.git/`, `_build/`: no skill, as from a disk
            skills.setdefault(top, {})[rest] = f
    found = {k: v for k, v in skills.items() if SKILL_MD in v}
    if not found:
        raise InvalidSkill(
            "the zip holds no skill: put SKILL.md at its root, or one directory per skill "
            "with a SKILL.md in each"
        )
    stray = sorted(
        p for p in files if p.partition("/")[0] not in found and not is_hidden_dir(p.split("/")[0])
    )
    if stray:
        raise InvalidPath(
            "these files of the zip are outside every skill directory: " + ", ".join(stray[:10])
        )
    if name_hint:
        return _named(found, name_hint)
    return found


def _named(found: dict[str, dict[str, File]], name: str) -> dict[str, dict[str, File]]:
    """The one skill directory of a zip under the name the operator typed, its SKILL.md's
    `name` following as a rename's does; a name typed for several skills is refused."""
    if len(found) > 1:
        raise InvalidPath(
            f"the zip holds {len(found)} skills ({', '.join(sorted(found)[:10])}), so it cannot "
            f"be named {name!r}: leave the skill name empty to import each under its "
            "directory's name, or zip one skill"
        )
    ((folder, files),) = found.items()
    name = check_skill_name(name)
    md = renamed_skill_md(files[SKILL_MD].data, folder, name)
    if md is not None:
        files = {**files, SKILL_MD: File(md, mode=files[SKILL_MD].mode)}
    return {name: files}


def _junk(name: str) -> bool:
    return name.startswith(_JUNK[0]) or name.rsplit("/", 1)[-1] in _JUNK[1:]


def _read_capped(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, budget: int, limit: int
) -> bytes:
    """The member's bytes, TooLarge as soon as they pass `budget`, what is left of the zip's
    `limit` (the store's per-skill limit, from the console)."""
    out = bytearray()
    try:
        with archive.open(member) as stream:
            while chunk := stream.read(1 << 16):
                out += chunk
                if len(out) > budget:
                    raise TooLarge(
                        f"the zip unpacks to more than {human_size(limit)}, the store's limit "
                        f"for one skill: it passed it at {member.filename!r}"
                    )
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError) as exc:
        raise InvalidSkill(f"cannot unpack {member.filename!r} from the zip: {exc}") from None
    return bytes(out)


def _frontmatter_name(data: bytes) -> str:
    fm = parse_skill_md(data).frontmatter or {}
    name = fm.get("name")
    return name if isinstance(name, str) else ""


def write_zip(store: Store, manifest: Manifest) -> bytes:
    """The skill as `<skill>/<path>` entries, with each file's mode, for download."""
    if manifest.deleted:
        raise NotFound(f"version {manifest.version} of {manifest.skill} is a deletion")
    blobs = store.read_entries(manifest.files.values())
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, entry in sorted(manifest.files.items()):
            stamp = time.localtime(max(entry.mtime, 315532800))  # zip dates start in 1980
            info = zipfile.ZipInfo(f"{manifest.skill}/{path}", date_time=stamp[:6])
            info.external_attr = (stat.S_IFREG | entry.mode) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, blobs[entry.sha256])
    return buf.getvalue()

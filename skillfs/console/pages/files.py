"""A skill's files one at a time, and the whole skill as a zip: download, upload, remove."""

from __future__ import annotations

import re
from urllib.parse import quote

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.archive import write_zip
from skillfs.console.call import Call, HTTPError
from skillfs.console.pages.rollout import candidate_manifest
from skillfs.console.skill_files import with_file
from skillfs.console.strict import confirm, forced
from skillfs.errors import FailedPrecondition, InvalidSkill, NotFound
from skillfs.governance.edits import ConflictPolicy
from skillfs.governance.rollout_rule import has_live
from skillfs.model import CommitResult, File, FileEntry, Manifest, Scope
from skillfs.model.names import normalize_path


def download(call: Call, scope: Scope, skill: str, path: str) -> Response:
    """A file's bytes, always as an attachment: skill content must never run in the console."""
    call.require(Level.read, scope)
    data = call.store.read(scope, skill, path, version=call.version_arg("version"))
    name = path.rsplit("/", 1)[-1]
    return _attachment(data, name)


def download_zip(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.read, scope)
    m = call.store.manifest(scope, skill, version=call.version_arg("version"))
    return _attachment(write_zip(call.store, m), f"{skill}-v{m.version}.zip")


def _attachment(data: bytes, filename: str) -> Response:
    ascii_name = re.sub(r"[^A-Za-z0-9._-]", "_", filename) or "file"
    disposition = f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(filename)}"
    return Response(
        data,
        media_type="application/octet-stream",
        headers={"Content-Disposition": disposition},
    )


def upload(call: Call, scope: Scope, skill: str) -> Response:
    """Add or replace a file (binary or text) from the browser (`store.edits.edit_file`)."""
    call.require(Level.write, scope)
    got = call.file("file")
    if got is None:
        raise HTTPError(400, "No file", "choose a file to upload")
    data = got.file.read()  # spooled by the form parser; the body's limit bounds it
    name = (got.filename or "").rsplit("/", 1)[-1]
    target = call.field("path").strip() or (
        call.field("dir").strip().strip("/") + "/" + name
    ).lstrip("/")
    path = normalize_path(target)
    expected = call.form_int("expected")
    m = call.store.manifest(scope, skill, version=expected)
    try:
        result = _write(call, scope, m, path, data, expected)
    except InvalidSkill as exc:
        return call.render_scope(
            "upload_rejected.html",
            scope,
            422,
            skill=skill,
            path=path,
            errors=exc.findings,
            expected=expected,
        )
    return call.done(
        urls.skill_url(scope, skill),
        f"Uploaded {path} ({len(data)} bytes): {skill} is now version {result.version}",
    )


def remove_file(call: Call, scope: Scope, skill: str) -> Response:
    """Remove one file (`store.edits.edit_file` with no data); the last one is not removed:
    that is deleting the skill, which its own button does."""
    call.require(Level.write, scope)
    path = normalize_path(call.field("path"))
    expected = call.form_int("expected")
    m = call.store.manifest(scope, skill, version=expected)
    files = shown_version(m).files
    if path not in files:
        raise NotFound(f"{skill} version {expected} has no file {path!r}")
    if len(files) == 1:
        raise FailedPrecondition(f"{path} is the last file of {skill}: delete the skill instead")
    try:
        result = _write(call, scope, m, path, None, expected)
    except InvalidSkill as exc:
        return confirm(
            call,
            urls.skill_url(scope, skill, "rmfile"),
            f"Removing {path} leaves {skill} off-spec",
            {skill: exc.findings},
        )
    return call.done(
        urls.skill_url(scope, skill), f"Removed {path}: {skill} is now version {result.version}"
    )


def shown_version(m: Manifest) -> Manifest:
    """The version the skill's page shows: a skill that was only staged, never live, opens
    on its candidate (docs/console.md)."""
    return m if has_live(m) else candidate_manifest(m)


def _write(
    call: Call, scope: Scope, m: Manifest, path: str, data: bytes | None, expected: int
) -> CommitResult:
    """`path` of the version the page shows set to `data` (None: removed), on top of
    `expected`: a never-live skill's candidate is staged again under its rule (an upload
    published a live version holding only the file, which every worker outside the rule then
    saw as a broken skill); else `store.edits.edit_file`, which keeps another writer's changes
    to other files and refuses (a Conflict, nothing written) when they changed this one."""
    strict = not forced(call)
    if m.candidate is not None and not has_live(m):
        shown = candidate_manifest(m)
        files: dict[str, File | FileEntry] = dict(shown.files)  # the others by reference
        if data is None:
            del files[path]
        else:
            files = with_file(shown, path, data)
        return call.store.rollouts.stage(
            scope, m.skill, files, m.candidate.rollout, options=call.options(expected),
            strict=strict,
        )  # fmt: skip
    entry = m.files.get(path)
    return call.store.edits.edit_file(
        scope,
        m.skill,
        path,
        data,
        base=call.store.read_entry(entry) if entry is not None else None,
        on_conflict=ConflictPolicy.FAIL,
        options=call.options(expected),
        strict=strict,
    )

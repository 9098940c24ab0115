"""Skills made, copied, renamed and deleted: new from the template, imported from a zip,
renamed in one commit, overridden for one user, deleted."""

from __future__ import annotations

import re

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.archive import read_zip
from skillfs.console.call import Call, HTTPError
from skillfs.console.diff import as_text
from skillfs.console.findings import findings_of
from skillfs.console.strict import confirm, forced
from skillfs.errors import Conflict, InvalidSkill
from skillfs.model import File, FileEntry, Origin, Put, Remove, Scope, error_findings
from skillfs.model.names import check_id, check_skill_name
from skillfs.spec.skill_md import SKILL_MD, skill_template
from skillfs.spec.validation import suggest_name


def scope_post(call: Call, scope: Scope) -> Response:
    """The scope page's forms: **New skill** and **Upload zip**."""
    op = call.field("op")
    if op == "new":
        return create(call, scope)
    if op == "import":
        return import_zip(call, scope)
    raise HTTPError(400, "Bad request", f"unknown action {op!r}")


def create(call: Call, scope: Scope) -> Response:
    call.require(Level.write, scope)
    name = check_skill_name(call.field("name").strip())
    description = call.field("description").strip()
    files = {SKILL_MD: File(skill_template(name, description))}
    try:
        result = call.store.publish(
            scope, name, files, expected_version=0, strict=not forced(call), actor=call.actor
        )
    except InvalidSkill as exc:
        return confirm(
            call,
            urls.scope_url(scope),
            f"{name} would break the spec",
            {name: exc.findings},
            name_field="name",
        )
    except Conflict:
        raise HTTPError(
            409,
            "That skill exists",
            f"{scope} already has a skill {name!r}: pick another name, or edit that one",
        ) from None
    return call.done(
        urls.skill_url(scope, name, "files", SKILL_MD),
        f"Created {name} (version {result.version}): now write its instructions",
    )


def import_zip(call: Call, scope: Scope) -> Response:
    call.require(Level.write, scope)
    got = call.file("archive")
    if got is None:
        raise HTTPError(400, "No file", "choose a .zip file holding a skill directory")
    skills = read_zip(got.file.read(), call.zip_limits, call.field("name").strip())
    replace = call.field("replace") == "1"
    try:
        result = call.store.commit(
            [
                Put(scope, name, dict(files), None if replace else 0)
                for name, files in skills.items()
            ],
            strict=not forced(call),
            actor=call.actor,
        )
    except InvalidSkill:
        # the store refuses at the first off-spec skill: the page lists every one of them
        problems = {
            name: errs
            for name, files in skills.items()
            if (errs := error_findings(findings_of(call.store, name, files)))
        }
        return call.render_scope(
            "import_rejected.html", scope, 422, problems=problems, replace=replace
        )
    except Conflict as exc:
        raise HTTPError(
            409,
            "A skill of that name exists",
            f"{exc}",
            "Tick “replace skills that exist” to overwrite them (their old versions stay "
            "in history).",
        ) from None
    names = sorted(result.versions)
    target = urls.skill_url(scope, names[0]) if len(names) == 1 else urls.scope_url(scope)
    return call.done(target, f"Imported {', '.join(names)} from {got.filename}")


def delete(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.write, scope)
    call.store.delete(scope, skill, expected_version=call.form_int("expected"), actor=call.actor)
    return call.done(
        urls.scope_url(scope), f"Deleted {skill}. It stays in history: restore it from there."
    )


_NAME_LINE = re.compile(r"^name[ \t]*:[ \t]*(['\"]?)(?P<name>[^'\"\n]*)\1[ \t]*$", re.MULTILINE)


def renamed_skill_md(data: bytes, old: str, new: str) -> bytes:
    """SKILL.md with its frontmatter `name` changed from `old` to `new` (the spec wants the name
    to equal the directory); anything else is left as it was."""
    text = as_text(data)
    if text is None or not text.startswith("---"):
        return data
    end = text.find("\n---", 3)
    if end < 0:
        return data
    head = text[:end]
    match = next((m for m in _NAME_LINE.finditer(head) if m.group("name").strip() == old), None)
    if match is None:
        return data
    head = head[: match.start()] + f"name: {new}" + head[match.end() :]
    return (head + text[end:]).encode()


def rename(call: Call, scope: Scope, skill: str) -> Response:
    """New name and removal of the old one in one commit, so no worker sees both or neither."""
    call.require(Level.write, scope)
    new = check_skill_name(call.field("new_name").strip())
    expected = call.form_int("expected")
    if skill in (new, suggest_name(new)):  # typed as it is, or as what the spec makes of it
        return call.done(
            urls.skill_url(scope, skill), f"Not renamed: “{skill}” is already its name"
        )
    m = call.store.manifest(scope, skill, version=expected)
    files: dict[str, File | FileEntry] = dict(m.files)  # the others kept by reference
    md = m.files.get(SKILL_MD)
    if md is not None:
        files[SKILL_MD] = File(
            renamed_skill_md(call.store.read_entry(md), skill, new), mode=md.mode
        )
    try:
        call.store.commit(
            [Put(scope, new, dict(files), 0), Remove(scope, skill, expected)],
            strict=not forced(call),
            actor=call.actor,
        )
    except InvalidSkill as exc:
        return confirm(
            call,
            urls.skill_url(scope, skill, "rename"),
            f"{new} would break the spec",
            {new: exc.findings},
            name_field="new_name",
        )
    except Conflict as exc:
        if exc.skill == new:
            raise HTTPError(
                409, "That name is taken", f"{scope} already has a skill {new!r}"
            ) from None
        raise
    return call.done(urls.skill_url(scope, new), f"Renamed {skill} to {new} in one commit")


def override(call: Call, scope: Scope, skill: str) -> Response:
    """Copy a shared skill into a user's scope, where it shadows the shared one for that user."""
    if scope.kind != "shared" or scope.agent_id is None:
        raise HTTPError(400, "Bad request", "overrides are made from an agent's shared skills")
    call.require(Level.read, scope)
    user = check_id("user", call.field("user").strip())
    target = Scope.user(scope.agent_id, user)
    call.require(Level.write, target)
    m = call.store.manifest(scope, skill, version=call.form_int("expected"))
    try:
        copy = Put(
            target, skill, m.files, 0, Origin(scope=str(scope), skill=skill, version=m.version)
        )
        result = call.store.commit(
            [copy], strict=not forced(call), actor=call.actor
        )  # the files by reference; the copy keeps the shared skill's kill switch
    except InvalidSkill as exc:
        return confirm(
            call,
            urls.skill_url(scope, skill, "override"),
            f"The shared {skill} breaks the spec; the copy would too",
            {skill: exc.findings},
        )
    except Conflict:
        held = call.store.manifests(target, [skill]).get(skill)
        if held is not None and held.hides:
            raise HTTPError(
                409,
                "Hidden from this user",
                f"{skill} is hidden from {user}: unhide it at {urls.skill_url(target, skill)} "
                "first, then make the override",
            ) from None
        raise HTTPError(
            409,
            "Override exists",
            f"user {user!r} already overrides {skill}: edit it at {urls.skill_url(target, skill)}",
        ) from None
    return call.done(
        urls.skill_url(target, skill, "files", SKILL_MD),
        f"Created {user}'s override of {skill} from shared version {m.version} "
        f"(user version {result.version}); only {user} sees the edits you make here",
    )

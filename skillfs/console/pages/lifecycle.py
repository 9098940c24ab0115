"""Skills made, copied, renamed and deleted: new from the template, imported from a zip,
renamed in one commit, overridden for one user, deleted. Each is one operation of the store
(`store.edits` but for a new skill, a plain publish), which holds it to every rule."""

from __future__ import annotations

from starlette.responses import Response

from skillfs.auth import Level
from skillfs.console import urls
from skillfs.console.archive import read_zip
from skillfs.console.call import Call, HTTPError
from skillfs.console.findings import findings_of, shown
from skillfs.console.pages.host_profiles import set_profiles
from skillfs.console.pages.review_rule import set_rule
from skillfs.console.pages.rollout import rollout_of
from skillfs.console.strict import confirm, forced
from skillfs.errors import Conflict, InvalidSkill
from skillfs.governance.edits import ImportPolicy
from skillfs.model import File, Scope, error_findings
from skillfs.model.names import check_id, check_skill_name
from skillfs.spec.skill_md import SKILL_MD, inspect_skill
from skillfs.spec.template import TEMPLATE_INSTRUCTIONS, placeholder_findings, skill_template
from skillfs.spec.validation import suggest_name


def scope_post(call: Call, scope: Scope) -> Response:
    """The scope page's forms: **New skill**, **Upload zip**, the two-person rule and the
    host profiles."""
    op = call.field("op")
    if op == "new":
        return create(call, scope)
    if op == "import":
        return import_zip(call, scope)
    if op == "review":
        return set_rule(call, scope)
    if op == "profiles":
        return set_profiles(call, scope)
    raise HTTPError(400, "Bad request", f"unknown action {op!r}")


#: How New skill writes it: live for everyone, a draft in the review queue, or a staged
#: candidate for the workers a rollout rule names (the form's buttons).
CREATE_AS = ("live", "draft", "canary")


def create(call: Call, scope: Scope) -> Response:
    """A new skill from the template with the form's description and instructions, written as
    the button says (`CREATE_AS`). What would reach a worker (live, canary) is refused while it
    still holds the template's placeholder text, as `skillfs edit` refuses it
    (skillfs.spec.template), until "Do it anyway"; a draft may hold it, a reviewer decides."""
    call.require(Level.write, scope)
    name = check_skill_name(call.field("name").strip())
    description = call.field("description").strip()
    instructions = call.field("instructions", TEMPLATE_INSTRUCTIONS)
    how = call.field("create") or "live"
    if how not in CREATE_AS:
        raise HTTPError(400, "Bad request", f"create is live, draft or canary, not {how!r}")
    text = skill_template(name, description, instructions)
    files = {SKILL_MD: File(text)}
    if how != "draft" and not forced(call):
        inspected = inspect_skill(name, {SKILL_MD: text}, call.store.host_profiles.of(scope))
        left = placeholder_findings(inspected.frontmatter, text.decode())
        if left:  # with the spec's errors, which the store would refuse next
            problems = shown([*left, *error_findings(inspected.findings)], text.decode())
            return confirm(
                call, urls.scope_url(scope), f"{name} still holds the template's text",
                {name: problems}, name_field="name",
            )  # fmt: skip
    try:
        if how == "draft":
            call.store.drafts.propose(scope, name, files, options=call.options(0))
            return call.done(
                urls.domain_page(scope.domain, "drafts"),
                f"Proposed {name} as a draft: it goes live when a reviewer approves it",
            )
        if how == "canary":
            rule = rollout_of(call)
            result = call.store.rollouts.stage(
                scope, name, files, rule, options=call.options(0), strict=not forced(call)
            )
        else:
            result = call.store.publish(
                scope, name, files, expected_version=0, strict=not forced(call),
                actor=call.actor, message=call.message,
            )  # fmt: skip
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
    if how == "canary":
        return call.done(
            urls.skill_url(scope, name) + "#rollout",
            f"Staged {name} (version {result.version}) for {rule.describe()}: "
            "nobody else sees it until you promote it",
        )
    return call.done(
        urls.skill_url(scope, name, "files", SKILL_MD), f"Created {name} (version {result.version})"
    )


def import_zip(call: Call, scope: Scope) -> Response:
    """A zip's skills in one commit (`store.edits.import_skills`), the source `zip:<file
    name>` (docs/cli.md, "Import sources"), under the form's policy for skills the scope holds
    with other files that an upload of this zip did not leave as they are: `update` (the
    default: nothing is written, and the store names them with who wrote them), `keep` (keep
    them, import the others) or `replace`. Skills whose files are the same are left as they
    are."""
    call.require(Level.write, scope)
    got = call.file("archive")
    if got is None:
        raise HTTPError(400, "No file", "choose a .zip file holding a skill directory")
    chosen = call.field("policy") or ImportPolicy.UPDATE.value
    if chosen not in {p.value for p in ImportPolicy}:
        raise HTTPError(400, "Bad request", f"policy is {', '.join(ImportPolicy)}, not {chosen!r}")
    policy = ImportPolicy(chosen)
    skills = read_zip(got.file.read(), call.zip_limits, call.field("name").strip())
    try:
        result = call.store.edits.import_skills(
            scope,
            skills,
            source=f"zip:{got.filename or 'upload.zip'}",
            policy=policy,
            batch=len(skills),  # one commit, all or nothing, as the page says
            options=call.options(),
            strict=not forced(call),
        )
    except InvalidSkill:
        # the store refuses at the first off-spec skill: the page lists every one of them,
        # judged under the scope's profiles as read once
        profiles = call.store.host_profiles.of(scope)
        found = {
            name: findings_of(call.store, scope, name, files, profiles=profiles)
            for name, files in skills.items()
        }
        problems = {name: errs for name, f in found.items() if (errs := error_findings(f))}
        return call.render_scope(
            "import_rejected.html", scope, 422, problems=problems, policy=policy.value
        )
    except Conflict as exc:  # the import's own read, not one the operator made: say so
        raise HTTPError(
            409,
            "Changed during the import",
            f"{exc.skill or 'a skill of the zip'} was changed by another writer while the zip "
            f"was being imported (it is now version {exc.current_version}); nothing was "
            "written: upload the zip again to import it on top of their change",
        ) from None
    said = {
        status: sorted(s.skill for s in result.skills if s.status == status)
        for status in ("created", "updated", "unchanged", "kept")
    }
    written = sorted(said["created"] + said["updated"])
    message = f"Imported {', '.join(written) or 'nothing'} from {got.filename}"
    if said["unchanged"]:
        message += f"; {', '.join(said['unchanged'])} already held these files (left as they were)"
    if said["kept"]:
        message += (
            f"; kept {', '.join(said['kept'])} as {urls.scope_label(scope)} holds them (changed "
            "since this zip was uploaded, or from elsewhere)"
        )
    names = sorted(skills)
    target = urls.skill_url(scope, names[0]) if len(names) == 1 else urls.scope_url(scope)
    return call.done(target, message)


def delete(call: Call, scope: Scope, skill: str) -> Response:
    call.require(Level.write, scope)
    call.store.edits.delete(scope, skill, options=call.options(call.form_int("expected")))
    return call.done(
        urls.scope_url(scope), f"Deleted {skill}. It stays in history: restore it from there."
    )


def rename(call: Call, scope: Scope, skill: str) -> Response:
    """`store.edits.rename`: the new name and the removal of the old one in one commit, so no
    worker sees both or neither; SKILL.md's `name` follows."""
    call.require(Level.write, scope)
    new = check_skill_name(call.field("new_name").strip())
    if skill in (new, suggest_name(new)):  # typed as it is, or as what the spec makes of it
        return call.done(
            urls.skill_url(scope, skill), f"Not renamed: “{skill}” is already its name"
        )
    try:
        call.store.edits.rename(
            scope, skill, new, options=call.options(call.form_int("expected")),
            strict=not forced(call),
        )  # fmt: skip
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
    """`store.edits.override`: the shared skill's version the operator saw, copied into a
    user's scope (its files by reference, its origin recorded), where it shadows the shared
    one for that user."""
    if scope.kind != "shared" or scope.agent_id is None:
        raise HTTPError(400, "Bad request", "overrides are made from an agent's shared skills")
    call.require(Level.read, scope)
    user = check_id("user", call.field("user").strip())
    target = Scope.user(scope.agent_id, user)
    call.require(Level.write, target)
    expected = call.form_int("expected")
    try:
        result = call.store.edits.override(
            target, skill, options=call.options(expected), strict=not forced(call)
        )
    except InvalidSkill as exc:
        return confirm(
            call,
            urls.skill_url(scope, skill, "override"),
            f"The shared {skill} breaks the spec; the copy would too",
            {skill: exc.findings},
        )
    except Conflict:
        held = call.store.manifests(target, [skill]).get(skill)
        if held is None:  # the shared skill moved since the page was loaded: the store says so
            raise
        if held.hides:
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
        f"Created {user}'s override of {skill} from shared version {expected} "
        f"(user version {result.version}); only {user} sees the edits you make here",
    )

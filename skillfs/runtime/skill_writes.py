"""Agent-written skills (docs/governance.md, "Agent-written skills"): the `propose_skill` and
`skill_manage` tools a worker offers when `Skills(..., skill_writes=)` is on.

They write to the worker's own user scope, as `agent:<agentId>/<userId>`: as drafts for an
operator to review (`"draft"`), or live (`"live"`, seen at the next step, C3). Each call is
one commit; whatever is wrong with it — a name, a path, the SKILL.md, a size, a concurrent
writer, the store — comes back as error text the model can act on, and nothing is written.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from skillfs.api import Store
from skillfs.errors import (
    FailedPrecondition,
    InvalidArgument,
    InvalidSkill,
    NotFound,
    PermissionDenied,
    SkillfsError,
    StoreUnavailable,
)
from skillfs.model import File, FileEntry, Finding, Manifest, Origin, Put, Scope, error_findings
from skillfs.model.names import check_live_name, draft_entry, normalize_path
from skillfs.model.ops import WriteOptions
from skillfs.runtime.layers import SkillInfo
from skillfs.spec.skill_md import SKILL_MD, inspect_skill
from skillfs.store.who import agent_actor

WriteMode = Literal["draft", "live"]
ToolStyle = Literal["openai", "anthropic"]
WRITE_TOOL_NAMES = ("propose_skill", "skill_manage")
ACTIONS = ("create", "edit", "write_file", "delete_file", "delete")

#: A file the tools write: bytes new from the model, or a stored one kept by reference.
Files = dict[str, File | bytes | FileEntry]


def check_mode(mode: str | None) -> WriteMode | None:
    """`skill_writes` as given to `Skills`: None (off), "draft" or "live"."""
    if mode is None or mode in get_args(WriteMode):
        return mode  # type: ignore[return-value]  # one of WriteMode's values, checked
    raise InvalidArgument(
        f"skill_writes={mode!r}: give 'draft' (agents propose drafts for review) or 'live' "
        "(agents publish to their user's scope), or leave it off (no write tools)"
    )


def write_tool_specs(mode: WriteMode) -> list[tuple[str, str, dict[str, Any]]]:
    """(name, description, JSON schema) of the write tools in `mode`."""
    where = (
        "as a draft for an operator to review: it is not among your skills until approved"
        if mode == "draft"
        else "to this user's own skills, live: it is among your skills from the next step"
    )
    text = {"type": "string"}
    return [
        (
            "propose_skill",
            f"Write a whole skill, new or replacing one of the same name, {where}. Give "
            "every file: SKILL.md is required and starts with YAML frontmatter whose `name` "
            "is the skill name and whose `description` says when to use it.",
            {
                "type": "object",
                "properties": {
                    "name": {
                        **text,
                        "description": "The skill name: lowercase letters, digits and "
                        "hyphens, e.g. 'release-notes'.",
                    },
                    "files": {
                        "type": "object",
                        "additionalProperties": text,
                        "description": "Every file of the skill as path -> text, e.g. "
                        '{"SKILL.md": "---\\nname: ...", "references/guide.md": "..."}.',
                    },
                    "message": {**text, "description": "Why: one line for the reviewer."},
                },
                "required": ["name", "files"],
                "additionalProperties": False,
            },
        ),
        (
            "skill_manage",
            f"Change one skill, {where}. Actions: 'create' (a new skill; content is its "
            "SKILL.md), 'edit' (replace SKILL.md, or the existing file at path, with "
            "content), 'write_file' (add or replace the file at path), 'delete_file' (the "
            "file at path), 'delete' (the whole skill).",
            {
                "type": "object",
                "properties": {
                    "action": {"type": "string", "enum": list(ACTIONS)},
                    "name": {**text, "description": "The skill name."},
                    "path": {
                        **text,
                        "description": "A file inside the skill, e.g. 'references/guide.md' "
                        "(edit: default SKILL.md).",
                    },
                    "content": {**text, "description": "The file's whole new text."},
                    "message": {**text, "description": "Why: one line for the history."},
                },
                "required": ["action", "name"],
                "additionalProperties": False,
            },
        ),
    ]


def shape(spec: tuple[str, str, dict[str, Any]], style: ToolStyle) -> dict[str, Any]:
    """OpenAI Chat Completions' function tool, or Anthropic Messages' tool."""
    name, description, schema = spec
    if style == "anthropic":
        return {"name": name, "description": description, "input_schema": schema}
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": schema},
    }


class SkillWriter:
    """The write tools of one (agent, user): what they may write, where, and as whom."""

    def __init__(self, store: Store, agent_id: str, user_id: str, mode: WriteMode) -> None:
        self.store = store
        self.mode = mode
        self.scope = Scope.user(agent_id, user_id)
        self.actor = agent_actor(agent_id, user_id)
        self._tools = {
            style: [shape(t, style) for t in write_tool_specs(mode)]
            for style in get_args(ToolStyle)
        }

    def tools(self, style: ToolStyle) -> list[dict[str, Any]]:
        """The tool definitions; equal at every step (prompt caches stay warm)."""
        return copy.deepcopy(self._tools[style])

    def call(
        self,
        name: str,
        args: Mapping[str, Any],
        view: Mapping[str, SkillInfo],
        read: Callable[[str, str], bytes],
    ) -> str:
        """Run a write tool; JSON text, or `Error: ...` text. `view` is the step's skills by
        id and `read(skill, path)` its files (a skill from a lower layer is the base of the
        user's copy)."""

        def run() -> str:
            if name == "propose_skill":
                return self._propose(args)
            action = _choice(args, "action", ACTIONS)
            return self._manage(action, args, view, read)

        return self._guarded(name, run)

    def change_file(
        self,
        skill: str,
        path: str,
        change: Callable[[bytes | None], bytes],
        view: Mapping[str, SkillInfo],
        read: Callable[[str, str], bytes],
    ) -> str:
        """One file of `skill` set to `change(its bytes, or None)`, under every rule of the
        tools (a skill that exists nowhere is created by writing its SKILL.md): the file
        writes of an agent framework's backend (deepagents). Text as `call`'s."""

        def run() -> str:
            at = self._state(check_live_name(skill), view)
            rel = _path(path)
            if at.own is None and at.seen is None and at.draft is None:
                if rel != SKILL_MD:
                    raise NotFound(
                        f"skill {skill!r} does not exist: write its {SKILL_MD} first to create it"
                    )
                return self._write("create", at, {SKILL_MD: change(None)}, "")
            base = self._base(at, read)
            held = base.get(rel)
            base[rel] = change(None if held is None else self._data(held))
            return self._write("write_file", at, base, "")

        return self._guarded("write_file", run)

    def _guarded(self, name: str, run: Callable[[], str]) -> str:
        """`run()`, or what was wrong with it as `Error: ...` text: nothing was written."""
        try:
            return run()
        except PermissionDenied as exc:
            return f"Error: {name}: {exc}; nothing was written{self._denied()}"
        except StoreUnavailable as exc:
            return (
                f"Error: {name}: the skill store is unavailable ({exc}); nothing was "
                "written; try again later"
            )
        except (SkillfsError, ValueError) as exc:
            return f"Error: {name}: {exc}"

    def _denied(self) -> str:
        """Why a live write was refused when the token may propose drafts but not write
        (a `propose` grant, docs/server.md): said to the model and the operator alike."""
        if self.mode != "live":
            return ""
        try:
            access = self.store.access(self.scope)
        except SkillfsError:
            return ""
        if not access.propose or access.write:
            return ""
        return (
            ". This agent may only propose drafts for review here (its token's grant on the "
            "user's scope is propose; skill_writes='live' needs write)"
        )

    # ------------------------------------------------------------------ the tools

    def _propose(self, args: Mapping[str, Any]) -> str:
        name = _name(args)
        files = args.get("files")
        if not isinstance(files, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in files.items()
        ):
            raise InvalidArgument(
                "argument 'files' must be an object of path -> text, e.g. "
                '{"SKILL.md": "---\\nname: ' + name + '\\ndescription: ...\\n---\\n..."}'
            )
        # as written: two paths that name one file are the store's to refuse, as for any write
        table: Files = {p: v.encode() for p, v in files.items()}
        if SKILL_MD not in {_path(p) for p in table}:
            raise InvalidArgument(f"files of {name!r} have no SKILL.md: every skill needs one")
        return self._write("propose_skill", self._state(name, None), table, _message(args))

    def _manage(
        self,
        action: str,
        args: Mapping[str, Any],
        view: Mapping[str, SkillInfo],
        read: Callable[[str, str], bytes],
    ) -> str:
        at = self._state(_name(args), view)
        name = at.name
        if action == "create":
            if at.own is not None or at.seen is not None or at.draft is not None:
                what = "a draft of it is pending review" if at.draft else "it exists"
                raise FailedPrecondition(
                    f"skill {name!r} cannot be created: {what}; use action 'edit' or "
                    "'write_file' to change it, or pick another name"
                )
            content = _text(args, "content").encode()
            return self._write("create", at, {SKILL_MD: content}, _message(args))
        if action == "delete":
            return self._delete(at, _message(args))
        base = self._base(at, read)
        if action == "edit":
            path = _path(args.get("path") or SKILL_MD)
            if path not in base:
                raise NotFound(
                    f"skill {name!r} has no file {path!r} to edit (files: "
                    f"{', '.join(sorted(base))}): use action 'write_file' to add one"
                )
            base[path] = _text(args, "content").encode()
        elif action == "write_file":
            base[_path(_text(args, "path"))] = _text(args, "content").encode()
        else:  # delete_file
            path = _path(_text(args, "path"))
            if path == SKILL_MD:
                raise FailedPrecondition("SKILL.md cannot be deleted: delete the skill instead")
            if base.pop(path, None) is None:
                raise NotFound(
                    f"skill {name!r} has no file {path!r} (files: {', '.join(sorted(base))})"
                )
        return self._write(action, at, base, _message(args))

    # ------------------------------------------------------------------ reading and writing

    def _state(self, name: str, view: Mapping[str, SkillInfo] | None) -> _State:
        """The user's own live entry of `name` and its pending draft, read now in one round
        trip (their versions guard the write), and the skill as the step sees it."""
        entry = draft_entry(name)
        held = self.store.manifests(self.scope, [name, entry])
        own, draft = held.get(name), held.get(entry)
        if self.mode == "live" and own is not None and own.disabled:
            why = f" ({own.disabled_reason})" if own.disabled_reason else ""
            raise FailedPrecondition(
                f"skill {name!r} is disabled for this user by an operator{why}: the agent "
                "cannot change it"
            )
        seen = view.get(name) if view is not None else None
        return _State(name, own, draft if self.mode == "draft" else None, seen)

    def _base(self, at: _State, read: Callable[[str, str], bytes]) -> Files:
        """The files an edit starts from: the pending draft (draft mode), else the user's
        own skill, else the skill as the step sees it from a lower layer (the user's copy
        overrides it, docs/design.md §5)."""
        for held in (at.draft, at.own):
            if held is not None and held.files:  # (a user's hiding entry holds none)
                return dict(held.files)
        if at.seen is None:
            raise NotFound(
                f"skill {at.name!r} does not exist: use action 'create' or propose_skill to "
                "write a new one"
            )
        if at.seen.scope is not None:  # a store layer: its files by reference
            return dict(at.seen.files)
        return {p: File(read(at.name, p), mode=e.mode) for p, e in at.seen.files.items()}

    def _write(self, action: str, at: _State, files: Files, message: str) -> str:
        """One commit: the draft's next version, or the user's skill's."""
        findings = self._check(at.name, files)
        message = message or f"{action} by {self.actor}"
        options = WriteOptions(actor=self.actor, message=message)
        if self.mode == "draft":
            expected = at.draft.version if at.draft is not None else 0
            result = self.store.drafts.propose(
                self.scope, at.name, files, strict=True,
                # an edit of the pending draft is built on what that draft was proposed on
                based_on=at.draft.base_version if at.draft is not None else None,
                options=options.model_copy(update={"expected_version": expected}),
            )  # fmt: skip
            version = result.versions.get(draft_entry(at.name))
            return self._done(action, at.name, version, findings, "draft")
        expected = at.own.version if at.own is not None else 0
        put = Put(self.scope, at.name, files, expected, self._origin(at))
        result = self.store.commit([put], options=options, strict=True)
        return self._done(action, at.name, result.versions.get(at.name), findings, "live")

    def _origin(self, at: _State) -> Origin | None:
        """What a live edit of a store layer's skill copies (the store holds the copy to
        that skill's kill switch, as it is when the copy is written and afterwards)."""
        own_files = at.own is not None and bool(at.own.files)
        seen = at.seen
        if own_files or seen is None or seen.scope is None or seen.version is None:
            return None
        return Origin(scope=str(seen.scope), skill=at.name, version=seen.version)

    def _delete(self, at: _State, message: str) -> str:
        """Live: delete the user's own skill. Draft: withdraw the pending draft; deleting a
        live skill is an operator's decision."""
        if self.mode == "draft":
            if at.draft is None:
                raise NotFound(
                    f"skill {at.name!r} has no pending draft to withdraw; deleting a live "
                    "skill is an operator's decision: say so in your answer instead"
                )
            withdraw = WriteOptions(actor=self.actor, expected_version=at.draft.version)
            result = self.store.drafts.reject(
                self.scope, at.name, message or "withdrawn by the agent", options=withdraw
            )
            version = result.versions.get(draft_entry(at.name))
            return self._done("delete", at.name, version, [], "withdrawn")
        if at.own is None:
            seen = at.seen
            where = f"it comes from {seen.source}, not" if seen is not None else "it is not in"
            raise NotFound(f"skill {at.name!r} cannot be deleted: {where} this user's own skills")
        result = self.store.delete(
            self.scope, at.name, at.own.version, actor=self.actor, message=message or "deleted"
        )
        return self._done("delete", at.name, result.versions.get(at.name), [], "deleted")

    def _check(self, name: str, files: Files) -> list[Finding]:
        """The skill's findings under the host profiles of the user's scope, as its commit
        makes them; one with errors (broken YAML, a name that is not the directory's, ...) is
        refused before anything is written."""
        skill_md = next((v for p, v in files.items() if _path(p) == SKILL_MD), None)
        if skill_md is None:
            raise InvalidArgument(f"nothing was written: {name} would have no SKILL.md")
        files_md = {SKILL_MD: self._data(skill_md)}
        findings = inspect_skill(name, files_md, self.store.host_profiles.of(self.scope)).findings
        errors = error_findings(findings)
        if errors:
            raise InvalidSkill(
                f"nothing was written: {name}/SKILL.md breaks the Agent Skills spec: "
                + "; ".join(e.message for e in errors),
                list(errors),
            )
        return findings

    def _data(self, value: File | bytes | FileEntry) -> bytes:
        """A file's bytes: new from the model, read from a disk layer, or stored."""
        if isinstance(value, FileEntry):
            return self.store.read_entry(value)
        return value.data if isinstance(value, File) else value

    def _done(
        self, action: str, name: str, version: int | None, findings: list[Finding], status: str
    ) -> str:
        out: dict[str, Any] = {
            "ok": True,
            "action": action,
            "skill": name,
            "status": status,
            "version": version,
            "scope": str(self.scope),
            "findings": [
                {"severity": f.severity, "rule": f.rule, "message": f.message} for f in findings
            ],
        }
        if status == "draft":
            out["draft"] = draft_entry(name)
            out["note"] = "an operator reviews it: it is not among your skills until approved"
        return json.dumps(out)


@dataclass(frozen=True)
class _State:
    """What a write starts from: the user's own live entry, its pending draft (draft mode),
    and the skill as the step sees it."""

    name: str
    own: Manifest | None
    draft: Manifest | None
    seen: SkillInfo | None


def _name(args: Mapping[str, Any]) -> str:
    return check_live_name(_text(args, "name"))


def _path(path: object) -> str:
    if not isinstance(path, str):
        raise InvalidArgument(f"argument 'path' must be a string, got {path!r}")
    return normalize_path(path)


def _text(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument {key!r} must be a string, got {value!r}")
    return value


def _message(args: Mapping[str, Any]) -> str:
    value = args.get("message")
    return "" if value is None else _text(args, "message")


def _choice(args: Mapping[str, Any], key: str, allowed: tuple[str, ...]) -> str:
    value = args.get(key)
    if value not in allowed:
        raise InvalidArgument(
            f"argument {key!r} must be one of {', '.join(allowed)}; got {value!r}"
        )
    return str(value)

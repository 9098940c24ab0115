"""A snapshot: the skills one worker sees for one reasoning step, and the tools over them.

A snapshot never changes (C4): it holds manifests, and files are read by their SHA-256, so
whatever lands in the store while the step runs, every read answers as of the snapshot. The
merged view behind it is shared by all snapshots with the same token (a digest of which
skill, from which layer, at which version), so `prompt()` and `tools()` are computed once per
token: byte-identical across steps, which keeps model providers' prompt caches warm.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath, PurePosixPath
from typing import Any

from skillfs.errors import InvalidArgument, NotFound, SkillfsError
from skillfs.model import FileEntry, Revision, Typed
from skillfs.model.names import normalize_path
from skillfs.runtime.layers import Problem, SkillInfo
from skillfs.runtime.materialize import materialize
from skillfs.runtime.model_tools import (
    LOAD_INSTRUCTIONS,
    SELECTORS,
    TOOL_SETS,
    ToolSet,
    by_name,
    by_path,
    not_found,
    skill_path,
    tool_specs,
)
from skillfs.runtime.prompt import MAX_DESCRIPTION, PromptOptions, prompt_description, render
from skillfs.runtime.session import Session
from skillfs.runtime.skill_writes import WRITE_TOOL_NAMES, SkillWriter, ToolStyle, shape
from skillfs.runtime.typed import TypedReadings
from skillfs.runtime.usage import UsageRecorder
from skillfs.spec.arguments import line_of, substitute
from skillfs.spec.skill_md import SKILL_MD, parse_skill_md
from skillfs.util.suggest import closest


def view_token(skills: Sequence[SkillInfo], hidden: frozenset[str] = frozenset()) -> str:
    """What the worker sees, as a digest: skill, layer and version (commit id or content),
    the label a pin holds it at, and the skills its session hid."""
    h = hashlib.sha256()
    for s in skills:
        staged = "\0candidate" if s.candidate else ""  # same version, other files
        # the same version held by a label or as the head: what `SkillInfo.pinned` says
        pinned = f"\0pinned\0{s.pinned}" if s.pinned else ""
        h.update(f"{s.id}\0{s.source}\0{s.digest}\0{s.version}{staged}{pinned}\n".encode())
    for skill_id in sorted(hidden):
        h.update(f"\0hidden\0{skill_id}\n".encode())
    return h.hexdigest()[:32]


class MergedSkills:
    """The merged skills of one token, with everything derived from them cached."""

    def __init__(
        self,
        skills: Sequence[SkillInfo],
        readings: TypedReadings,
        hidden: frozenset[str] = frozenset(),
    ) -> None:
        self.skills = tuple(skills)
        #: The skill ids the worker's session hid (runtime/session.py).
        self.hidden = hidden
        self.token = view_token(self.skills, hidden)
        self.by_id = {s.id: s for s in self.skills}
        model = tuple(s for s in self.skills if s.invocation.model and s.id not in hidden)
        #: What the model sees: the skills without `disable-model-invocation: true`, and not
        #: hidden by the session.
        self.model_skills = self.skills if len(model) == len(self.skills) else model
        self.model_ids = frozenset(s.id for s in self.model_skills)
        self._readings = readings
        self._typed: dict[str, Typed] | None = None
        self._prompts: dict[tuple[PurePath | None, PromptOptions, ToolSet], str] = {}
        self._tools: dict[tuple[bool, ToolStyle, ToolSet], list[dict[str, Any]]] = {}

    def typed(self) -> Mapping[str, Typed]:
        if self._typed is None:
            self._typed = self._readings.of(self.skills)
        return self._typed

    def prompt(self, shown_root: PurePath | None, options: PromptOptions, tool_set: ToolSet) -> str:
        key = (shown_root, options, tool_set)
        text = self._prompts.get(key)
        if text is None:
            how = LOAD_INSTRUCTIONS[tool_set]
            text = self._prompts[key] = render(self.model_skills, shown_root, options, how)
        return text

    def tools(self, enum: bool, style: ToolStyle, tool_set: ToolSet) -> list[dict[str, Any]]:
        key = (enum, style, tool_set)
        defs = self._tools.get(key)
        if defs is None:  # no skills, no skill tools (as no block: runtime/prompt.py)
            specs = self._tool_specs(enum, tool_set) if self.model_skills else []
            defs = self._tools[key] = [shape(t, style) for t in specs]
        return copy.deepcopy(defs)

    def _tool_specs(self, enum: bool, tool_set: ToolSet) -> list[tuple[str, str, dict[str, Any]]]:
        if not enum:
            return tool_specs(tool_set)
        names = sorted({s.name for s in self.model_skills})
        return tool_specs(tool_set, [s.id for s in self.model_skills], names)


class Snapshot:
    """The skills of one (agent, user) for one reasoning step; immutable (C4)."""

    __slots__ = (
        "_lease",
        "_merged",
        "_session",
        "_token",
        "_usage",
        "_writer",
        "agent_id",
        "bound_tools",
        "files_root",
        "host_tools",
        "problems",
        "revisions",
        "shown_root",
        "stale",
        "tool_set",
        "user_id",
    )

    def __init__(
        self,
        merged: MergedSkills,
        *,
        agent_id: str,
        user_id: str,
        revisions: Mapping[str, Revision | None],
        problems: Sequence[Problem],
        usage: UsageRecorder,
        files_root: Path | None = None,
        shown_root: PurePath | None = None,
        stale: bool = False,
        writer: SkillWriter | None = None,
        lease: object = None,
        tool_set: ToolSet = "default",
        session: Session | None = None,
        bound_tools: tuple[str, ...] = (),
        host_tools: tuple[str, ...] = (),
    ) -> None:
        self._merged = merged
        #: The host tools this session's loaded skills bind (docs/runtime.md, "Tools bound
        #: to skills"), in the order the host registered them.
        self.bound_tools = bound_tools
        #: The host's tools to offer the model at this step: those not bindable, and the
        #: bound ones, in the order registered (the same tuple while nothing changed).
        self.host_tools = host_tools
        self._token = merged.token if not bound_tools else _bound_token(merged.token, bound_tools)
        self._usage = usage
        self._writer = writer
        self._session = session or Session()
        #: The tools the model is given (runtime/model_tools.py).
        self.tool_set: ToolSet = tool_set
        #: Keeps what the worker holds (its store) while this snapshot is in use.
        self._lease = lease
        self.agent_id = agent_id
        self.user_id = user_id
        #: The revision of each store domain (agent, markets) this snapshot is as of.
        self.revisions: Mapping[str, Revision | None] = dict(revisions)
        #: Skills left out of the view (no usable SKILL.md), with why, for operators.
        self.problems: tuple[Problem, ...] = tuple(problems)
        #: Where `materialize` wrote the files; None when not materialized.
        self.files_root = files_root
        #: The files root the model is told (`<files-root>`, `Files root:`): `files_root`, or
        #: where a sandbox sees it (`materialize(shown_as=)`).
        self.shown_root = shown_root if shown_root is not None else files_root
        #: True when served from the last snapshot because the store was unavailable.
        self.stale = stale

    def _replace(self, **changes: Any) -> Snapshot:
        fields: dict[str, Any] = {
            "agent_id": self.agent_id,
            "user_id": self.user_id,
            "revisions": self.revisions,
            "problems": self.problems,
            "usage": self._usage,
            "files_root": self.files_root,
            "shown_root": self.shown_root,
            "stale": self.stale,
            "writer": self._writer,
            "lease": self._lease,
            "tool_set": self.tool_set,
            "session": self._session,
            "bound_tools": self.bound_tools,
            "host_tools": self.host_tools,
        }
        fields.update(changes)
        merged = fields.pop("merged", self._merged)
        return Snapshot(merged, **fields)

    @property
    def token(self) -> str:
        """Equal tokens mean equal views: same skills, same layers, same versions, same
        skills hidden and host tools bound by the session."""
        return self._token

    @property
    def session(self) -> str | None:
        """The id of the conversation this snapshot is of; None: the worker's own session."""
        return self._session.id

    @property
    def merged(self) -> MergedSkills:
        """The merged skills behind this snapshot, shared by the snapshots of its token."""
        return self._merged

    @property
    def skills(self) -> tuple[SkillInfo, ...]:
        """The skills in the view, sorted by id."""
        return self._merged.skills

    def typed(self) -> Mapping[str, Typed]:
        """Each skill's typed reading of its frontmatter, by skill id (docs/validation.md,
        "Two readings"): what MCP serves. Made once per token; a manifest stored before the
        reading existed has its SKILL.md read for it here (one batch per layer)."""
        return self._merged.typed()

    def __repr__(self) -> str:
        return (
            f"Snapshot({self.agent_id}/{self.user_id}, {len(self.skills)} skills, "
            f"token {self.token[:12]})"
        )

    # ------------------------------------------------------------------ skills and files

    @property
    def model_skills(self) -> tuple[SkillInfo, ...]:
        """The skills the model sees (prompt, tools, their listings): all but those whose
        SKILL.md says `disable-model-invocation: true`, which users invoke (`invoke`), and
        those the model disabled in this session (`disable_skill`)."""
        hidden = self._session.hidden
        if hidden == self._merged.hidden:
            return self._merged.model_skills
        return tuple(s for s in self._merged.model_skills if s.id not in hidden)

    def skill(self, skill_id: str) -> SkillInfo:
        """A skill of the view, the model's or not; NotFound lists every available id."""
        return _lookup(skill_id, self._merged.by_id, self.skills)

    def model_skill(self, skill_id: str) -> SkillInfo:
        """A skill the model may read; NotFound lists the ids the model sees, and says so of
        a skill only users invoke."""
        s = self._merged.by_id.get(skill_id) if isinstance(skill_id, str) else None
        if s is not None and not s.invocation.model:
            raise NotFound(
                f"skill {skill_id!r} is not available to the model: its SKILL.md says "
                "disable-model-invocation: true (a user invokes it)"
            )
        if s is not None and s.id in self._session.hidden:
            raise NotFound(
                f"skill {skill_id!r} was disabled for the rest of this session (disable_skill)"
            )
        return _lookup(skill_id, self._merged.by_id, self.model_skills)

    def select(
        self,
        skill_id: str | None = None,
        skill_name: str | None = None,
        skill_path: str | None = None,
    ) -> SkillInfo:
        """The skill the model names by id, frontmatter name or directory (Spring AI
        Alibaba's `read_skill`); InvalidArgument when none is given or they name different
        skills, NotFound (as `model_skill`) when one names none the model may read."""
        given = {
            k: v
            for k, v in zip(SELECTORS, (skill_id, skill_name, skill_path), strict=True)
            if v is not None
        }
        if not given:
            raise InvalidArgument("name the skill: give skill_id, skill_name or skill_path")
        found = {k: self.model_skill(self._named(k, v)) for k, v in given.items()}
        ids = {s.id for s in found.values()}
        if len(ids) > 1:
            said = ", ".join(f"{k} {given[k]!r} is skill {s.id!r}" for k, s in found.items())
            raise InvalidArgument(f"the arguments name different skills ({said}): give one")
        return next(iter(found.values()))

    def _named(self, selector: str, value: str) -> str:
        """The id of the skill `value` names (a skill id is itself), among the skills the model
        sees, else among all (so `model_skill` says why the model may not read it)."""
        if selector == "skill_id":
            return value
        for among in (self.model_skills, self.skills):
            s = (
                by_name(value, among)
                if selector == "skill_name"
                else by_path(value, among, self.shown_root)
            )
            if s is not None:
                return s.id
        if selector == "skill_name":
            raise not_found("name", value, sorted({s.name for s in self.model_skills}))
        paths = [skill_path(s, self.shown_root) for s in self.model_skills]
        raise not_found("path", value, paths)

    def read_bytes(self, skill_id: str, path: str) -> bytes:
        """A file's bytes as of this snapshot; NotFound lists the skill's files."""
        s = self.skill(skill_id)
        return s.reader.read_entry(_entry(s, path)[1])

    def load(self, skill_id: str, path: str = SKILL_MD) -> str:
        """load_skill_through_path: SKILL.md with a header saying which skill, from which
        layer, and where its files are; any other path returns that file's text. Refused for
        a skill the model does not see (`model_skill`)."""
        s = self.model_skill(skill_id)
        norm, entry = _entry(s, path)
        cut = entry.size > LOAD_MAX
        text = _text(norm, s.reader.read_entry(entry, 0, LOAD_MAX if cut else None), entry.size)
        self._usage.add(self.user_id, s.id)
        if norm != SKILL_MD:
            return text
        self._session.load(s.id)
        version = f", version {s.version}" if s.version is not None else ""
        others = [p for p in sorted(s.files) if p != SKILL_MD]
        header = [f"Skill: {s.id} (source: {s.source}{version})"]
        if self.shown_root is not None:
            header.append(f"Files root: {self.shown_root / s.source_dir / s.id}")
        listed = ", ".join(others[:LIST_MAX]) if others else "none besides SKILL.md"
        if len(others) > LIST_MAX:
            listed += f", … and {len(others) - LIST_MAX} more (search_skills finds them by path)"
        header.append(f"Files (load with load_skill_through_path, skill_id={s.id!r}): {listed}")
        return "\n".join([*header, "", text])

    def read_skill(self, skill_id: str) -> str:
        """The skill's instructions: SKILL.md without its frontmatter. Refused for a skill
        the model does not see (`model_skill`)."""
        s = self.model_skill(skill_id)
        body = self._body(s) + "\n"
        self._session.load(s.id)
        if len(s.description.strip()) > MAX_DESCRIPTION:  # the prompt showed it cut
            return f"Description: {s.description.strip()}\n\n{body}"
        return body

    def use_skill(self, skill_name: str) -> str:
        """harness9's `use_skill`: the instructions of the skill named `skill_name` (its
        frontmatter name, else its id), as `read_skill` gives them."""
        return self.read_skill(self.select(skill_name=skill_name).id)

    def disable_skill(self, skill_id: str) -> str:
        """Spring AI Alibaba's `disable_skill`: hide a skill from the model for the rest of
        this snapshot's session (runtime/session.py); later snapshots leave it out of the
        prompt and the tools, and reads of it are refused from now on."""
        s = self.model_skill(skill_id)
        self._session.hide(s.id)
        return (
            f"Skill {s.id!r} is disabled for the rest of this conversation: it leaves the "
            "skills list at the next step, and reading it is refused."
        )

    def invoke(self, skill_id: str, arguments: str | Mapping[str, str] = "") -> str:
        """A user's invocation of a skill (Claude Code's `/skill-name args`, an MCP prompt):
        its instructions with `$ARGUMENTS` substituted (spec/arguments.py). `arguments` is
        the line as typed, or named values (the frontmatter's `arguments`, else the one
        name `arguments`). Works for a skill the model does not see; NotFound for one whose
        SKILL.md says `user-invocable: false`."""
        s = self.skill(skill_id)
        how = s.invocation
        if not how.user:
            raise NotFound(
                f"skill {skill_id!r} is not invoked by users: its SKILL.md says "
                "user-invocable: false (the model loads it when a task needs it)"
            )
        if not isinstance(arguments, str):
            arguments = line_of(how.argument_names, arguments)
        return substitute(self._body(s), arguments, how.argument_names) + "\n"

    def _body(self, s: SkillInfo) -> str:
        """SKILL.md without its frontmatter, without blank lines around it; one use."""
        data = s.reader.read_entry(_entry(s, SKILL_MD)[1])
        self._usage.add(self.user_id, s.id)
        return parse_skill_md(data).body.strip("\n")

    def search_skills(self, query: str) -> list[SkillInfo]:
        """Skills the model sees whose id, name, description or a file path contains every
        word of `query`, best first (name hits before description hits before path hits)."""
        words = query.lower().split()
        scored: list[tuple[int, str, SkillInfo]] = []
        for s in self.model_skills:
            name, desc = f"{s.id} {s.name}".lower(), s.description.lower()
            paths = " ".join(s.files).lower()
            score = 0
            for w in words:
                hit = 3 if w in name else 2 if w in desc else 1 if w in paths else 0
                if not hit:
                    break
                score += hit
            else:
                scored.append((-score, s.id, s))
        return [s for _, _, s in sorted(scored, key=lambda t: (t[0], t[1]))]

    # ------------------------------------------------------------------ prompt and tools

    def prompt(self, options: PromptOptions | None = None) -> str:
        """The `<available_skills>` block for the system prompt, or the form `options` ask
        for (runtime/prompt.py); empty when the view holds no skill. Cached per token."""
        return self._merged.prompt(self.shown_root, options or _DEFAULT_PROMPT, self.tool_set)

    def tools(self, *, enum: bool = False, style: ToolStyle = "openai") -> list[dict[str, Any]]:
        """Tool definitions (JSON schema) of the worker's tool set (`Skills(..., tools=)`; the
        default: `load_skill_through_path`, `read_skill` and `search_skills`), in OpenAI's
        function-tool shape or Anthropic's (`style`); none when the view holds no skill. The
        skill
        id is a plain string unless `enum`: an enum changes the tools whenever a skill is
        added, which invalidates the provider's prompt cache. With `Skills(...,
        skill_writes=)` on, `propose_skill` and `skill_manage` follow (also in an empty view:
        an agent may write its first skill)."""
        tools = self._merged.tools(enum, style, self.tool_set)
        return tools + self._writer.tools(style) if self._writer is not None else tools

    @property
    def tool_names(self) -> tuple[str, ...]:
        """The names `call_tool` answers."""
        names = TOOL_SETS[self.tool_set]
        return names + (WRITE_TOOL_NAMES if self._writer is not None else ())

    def call_tool(self, name: str, arguments: Mapping[str, Any] | str) -> str:
        """Run one of `tools()` and return its text result, or the error as text, so a model
        that got an id or path wrong reads the listing and corrects itself."""
        return self.tool_outcome(name, arguments)[0]

    def tool_outcome(self, name: str, arguments: Mapping[str, Any] | str) -> tuple[str, bool]:
        """`call_tool`'s text, and whether the call failed: a file whose text begins with
        "Error:" is read, not failed (MCP's `isError`)."""
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
            if not isinstance(args, Mapping):
                raise ValueError("arguments must be a JSON object")
            args = dict(args)
        except ValueError as exc:
            return f"Error: invalid arguments for {name}: {exc}", True
        try:
            if name in TOOL_SETS[self.tool_set]:
                return self._call(name, args), False
        except SkillfsError as exc:
            return f"Error: {exc}", True
        if name in WRITE_TOOL_NAMES and self._writer is not None:
            text = self._writer.call(name, args, self._merged.by_id, self.read_bytes)
            return text, text.startswith("Error:")  # its results are JSON, never that
        return f"Error: unknown tool {name!r}; tools: {', '.join(self.tool_names)}", True

    def _call(self, name: str, args: Mapping[str, Any]) -> str:
        """One tool of the worker's set, as `tool_specs` defines its arguments."""
        if name == "load_skill_through_path":
            return self.load(_arg(args, "skill_id"), _arg(args, "path"))
        if name == "search_skills":
            return self._search_text(_arg(args, "query"))
        if name == "use_skill":
            return self.use_skill(_arg(args, "skill_name"))
        if self.tool_set != "saa":  # the default read_skill: by skill_id
            return self.read_skill(_arg(args, "skill_id"))
        unknown = sorted(set(args) - set(SELECTORS))
        if unknown:
            raise InvalidArgument(f"unknown argument {unknown[0]!r}; give {', '.join(SELECTORS)}")
        s = self.select(**{k: _arg(args, k) for k in SELECTORS if args.get(k) is not None})
        return self.read_skill(s.id) if name == "read_skill" else self.disable_skill(s.id)

    def change_file(self, skill: str, path: str, change: Callable[[bytes | None], bytes]) -> str:
        """One file of `skill` set to `change(its bytes, or None)` as `skill_manage` writes
        it (same rules, same JSON text or `Error: ...` text): an agent framework's file
        writes (deepagents). Off unless `Skills(..., skill_writes=)` is on."""
        if self._writer is None:
            return (
                "Error: write_file: skill writes are off for this worker; the skills are "
                "read-only (a worker turns them on with Skills(..., skill_writes='draft' or "
                "'live'))"
            )
        return self._writer.change_file(skill, path, change, self._merged.by_id, self.read_bytes)

    def _search_text(self, query: str) -> str:
        hits = self.search_skills(query)
        if not hits:
            return f"No skill matches {query!r}. Available skill ids: " + ", ".join(
                s.id for s in self.model_skills
            )
        lines = (f"{s.id}: {prompt_description(s.description)}" for s in hits)
        return "\n".join(lines)  # one line each: the description as the prompt shows it

    # ------------------------------------------------------------------ materializing

    def materialize(
        self, directory: str | Path = ".skills-cache", *, shown_as: str | None = None
    ) -> Snapshot:
        """Write this snapshot's skills under `directory/<source>/<skill>/` and return the
        snapshot with `files_root` set, whose prompt and SKILL.md headers then name the
        directories: under `shown_as` instead when given, the absolute path at which a
        sandbox (a container's mount) sees `directory`. Incremental: only files whose hash
        changed are rewritten. A skill with a path no file system holds (stored before the
        path caps) is skipped, with a warning and a Problem in the returned snapshot's
        `problems`."""
        shown = None if shown_as is None else _shown_root(shown_as)
        root = Path(directory).expanduser().resolve()
        skipped = materialize(self.skills, root, self.token)
        return self._replace(files_root=root, shown_root=shown, problems=(*self.problems, *skipped))


_DEFAULT_PROMPT = PromptOptions()
#: The most bytes of a file `load` returns (a tool result a model can use, and one message of
#: the server's LoadSkillThroughPath); a longer file is cut with a marker naming the range.
LOAD_MAX = 256 * 1024
#: The most file paths SKILL.md's header lists.
LIST_MAX = 200


def _bound_token(token: str, bound: tuple[str, ...]) -> str:
    """A view's token with the host tools a session bound in it."""
    return hashlib.sha256(f"{token}\0bound\0{chr(0).join(bound)}".encode()).hexdigest()[:32]


def _shown_root(shown_as: str) -> PurePosixPath:
    """`materialize(shown_as=)` checked: an absolute POSIX path, nothing to normalize away."""
    if not isinstance(shown_as, str) or not shown_as.startswith("/"):
        raise InvalidArgument(
            f"shown_as={shown_as!r}: give the absolute path at which the sandbox sees the "
            "materialized directory, e.g. '/workspace/.skills-cache'"
        )
    shown = PurePosixPath(shown_as)
    if ".." in shown.parts or any(c in shown_as for c in "\0\n\r"):
        raise InvalidArgument(f"shown_as={shown_as!r}: no '..', line breaks or NUL in the path")
    return shown


def _lookup(skill_id: str, by_id: Mapping[str, SkillInfo], among: Sequence[SkillInfo]) -> SkillInfo:
    """The skill `skill_id`; NotFound lists the ids of `among`, with a "did you mean"."""
    s = by_id.get(skill_id) if isinstance(skill_id, str) else None
    if s is None:
        raise not_found("id", skill_id, [x.id for x in among])
    return s


def _entry(s: SkillInfo, path: str) -> tuple[str, FileEntry]:
    """A file of `s` by its path, normalized; NotFound lists the skill's files."""
    try:
        norm = normalize_path(path)
    except InvalidArgument as exc:
        raise NotFound(f"{exc}. Files of skill {s.id!r}: {', '.join(s.files)}") from exc
    entry = s.files.get(norm)
    if entry is None:
        paths = sorted(s.files)
        near = closest(norm, paths)
        hint = f" Did you mean {near!r}?" if near else ""
        raise NotFound(
            f"skill {s.id!r} has no file {path!r}.{hint} "
            f"Files of skill {s.id!r}: {', '.join(paths)}"
        )
    return norm, entry


def _arg(args: Mapping[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str):
        raise InvalidArgument(f"argument {key!r} must be a string, got {value!r}")
    return value


def _text(path: str, data: bytes, size: int) -> str:
    """A file as tool-result text (`data`: its first bytes when it is longer than LOAD_MAX,
    cut with a marker naming the range shown); a binary file is described instead."""
    if b"\0" not in data:
        for trim in range(4 if len(data) < size else 1):  # a character cut by the range
            try:
                text = data[: len(data) - trim].decode("utf-8")
            except UnicodeDecodeError:
                continue
            if len(data) < size:
                shown = len(data) - trim
                text += (
                    f"\n[… cut: bytes 0-{shown} of {size} shown, the most one tool result "
                    f"holds; materialize the skills to read all of {path} from a shell]"
                )
            return text
    return (
        f"[{path} is a binary file of {size} bytes; materialize the skills to use it from a shell]"
    )

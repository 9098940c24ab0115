"""Where a worker's skills come from, and how the layers merge (docs/design.md §1).

A layer yields a `LayerSkills`: an immutable mapping of skill directory -> `Manifest` plus a
way to read a file by its table entry. Store scopes get theirs from the follower; `LocalDir`
(runtime/local_dir.py) and `GitRepo` (runtime/git_repo.py) build theirs from disk or Git
objects (runtime/checked.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from skillfs.governance.pin_rule import served
from skillfs.model import FileEntry, Finding, Manifest, Scope, Typed, error_findings
from skillfs.model.names import check_id, is_hidden_dir, name_key
from skillfs.model.pins import Pins
from skillfs.spec.invocation import Invocation, invocation


class Reader(Protocol):
    """Reads files of a layer by their manifest entries: the `Store` itself for store
    layers, the bytes held in memory for disk and Git layers."""

    def read_entry(self, entry: FileEntry, start: int = 0, end: int | None = None) -> bytes:
        """A file's bytes, or those of [start, end)."""
        ...

    def read_entries(self, entries: Iterable[FileEntry]) -> Mapping[str, bytes]:
        """Bytes by SHA-256, in as few round trips as the layer allows."""
        ...


@dataclass(frozen=True, eq=False)
class LayerSkills:
    """One layer's skills at one moment. Never mutated: a change makes a new object, so
    comparing identities tells whether anything in the layer changed."""

    manifests: Mapping[str, Manifest]
    reader: Reader


@dataclass(frozen=True)
class Problem:
    """A skill left out of the worker's view, with the findings that say why (for operators)."""

    skill: str
    source: str
    findings: tuple[Finding, ...]
    #: Left out because it is disabled there (docs/governance.md): the reason, maybe "".
    disabled: str | None = None

    @property
    def errors(self) -> list[Finding]:
        return error_findings(self.findings)


@dataclass(frozen=True, slots=True)
class SkillInfo:
    """One skill of the merged view: what it is and which layer it came from."""

    id: str
    name: str
    description: str
    source: str  # the layer's label, e.g. "user:support-bot/alice", "git:team-skills"
    source_dir: str  # the layer's directory under a materialized root, e.g. "user"
    scope: Scope | None  # the store scope, None for disk and Git layers
    version: int | None  # the store version, None for disk and Git layers
    digest: str  # the store commit id, or the content digest of a disk skill
    files: Mapping[str, FileEntry]
    findings: tuple[Finding, ...]  # spec violations of a usable skill, for operators
    shadows: tuple[str, ...]  # labels of the lower layers holding a skill of the same id
    frontmatter: Mapping[str, Any]  # the textual reading: every scalar as written
    #: The typed reading (docs/validation.md, "Two readings"), what MCP serves; None for a
    #: manifest stored before it existed (`Snapshot.typed` makes it from SKILL.md).
    typed: Typed | None
    reader: Reader = field(repr=False, compare=False)
    #: The staged candidate of `version`, which this worker's rollout rule gives it
    #: (docs/governance.md, "Staged rollout"); False: the live version.
    candidate: bool = False
    #: The label this worker's pins hold it at (docs/governance.md, "Labels and pins"), whose
    #: version `version` is; None: not held by a label (the head, or the candidate).
    pinned: str | None = None

    @property
    def invocation(self) -> Invocation:
        """Who may invoke the skill, and its arguments (Claude Code's fields)."""
        return invocation(self.frontmatter)


class Layer:
    """A source of skills with a label (shown to models and operators) and a directory name
    for the materialized layout (`.skills-cache/<source_dir>/<skill>/`)."""

    label: str
    source_dir: str
    scope: Scope | None = None  # the store scope of a KV layer
    #: The environment this layer's staged rollouts are evaluated for; None: the worker's.
    environment: str | None = None


class Market(Layer):
    """A KV `market` scope (docs/design.md §1): a skill registry kept in the store.
    `environment` overrides the worker's for this market's staged rollouts."""

    def __init__(self, market_id: str, *, environment: str | None = None) -> None:
        self.scope: Scope = Scope.market(check_id("market", market_id))
        self.environment = None if environment is None else check_id("environment", environment)
        self.label = str(self.scope)
        self.source_dir = f"market-{market_id}"

    def __repr__(self) -> str:
        env = f", environment={self.environment!r}" if self.environment else ""
        return f"Market({self.scope.market_id!r}{env})"


class StoreScope(Layer):
    """The agent-shared or per-user scope; Skills adds these two on top of the given layers."""

    def __init__(self, scope: Scope) -> None:
        self.scope: Scope = scope
        self.label = str(scope)
        self.source_dir = scope.kind  # "shared" or "user": one of each per worker


def merge(
    layers: Sequence[tuple[Layer, LayerSkills]],
    user: str,
    environment: str | None = None,
    pins: Pins | None = None,
) -> tuple[list[SkillInfo], list[Problem]]:
    """Lowest layer first; a usable skill shadows the whole same-named skill below it.

    An unusable skill (no SKILL.md with name and description) is left out and shadows
    nothing, so a half-written override never hides the working skill below it. A disabled
    skill is a hole: it shadows its name and contributes nothing (docs/governance.md). A
    store skill with a staged candidate is what `rollout.effective` gives `user` in
    `environment` (the layer's own, for a `Market` that names one); a store skill `pins` hold
    at a label it carries is that label's version (`pin_rule.served`: a pin beats a
    rollout, a disable beats a pin). A copy whose origin an
    operator disabled is a hole too (docs/governance.md, "Disable"), whenever it was made.
    A name that looks like a lower layer's (`names.name_key`: `PDF` over `pdf`, a Cyrillic
    letter over a Latin one) shadows it as an equal name would, and the shadowed skill is a
    problem with the finding `look-alike` (docs/security.md, "Look-alike names"); twins of
    one layer, stored before the rule, both stay."""
    winners: dict[str, SkillInfo] = {}
    problems: list[Problem] = []
    stacked = {str(layer.scope): skills for layer, skills in layers if layer.scope is not None}
    twins = _Twins(winners, problems)
    for level, (layer, skills) in enumerate(layers):
        scope = layer.scope
        env = layer.environment or environment
        for skill in sorted(skills.manifests):
            live = skills.manifests[skill]
            if is_hidden_dir(skill) or live.deleted:
                continue
            pin = pins.of(layer.label, skill) if pins and scope is not None else None
            m, pinned = (live, None) if scope is None else served(live, scope, user, env, pin)
            if m is None:  # staged, never live, and not for this worker
                continue
            if m.disabled:
                winners.pop(skill, None)
                twins.shadow(skill, level, layer.label)
                problems.append(Problem(skill, layer.label, (), disabled=m.disabled_reason))
                continue
            off = _origin_disabled(m, stacked, layer.label)
            if off is not None:
                winners.pop(skill, None)
                twins.shadow(skill, level, layer.label)
                problems.append(off)
                continue
            if not m.usable:
                problems.append(Problem(skill, layer.label, tuple(m.findings)))
                continue
            fm = m.frontmatter or {}
            below = winners.get(skill)
            alike = twins.shadow(skill, level, layer.label)
            below_sources = (*below.shadows, below.source) if below else ()
            below_sources += tuple(s for info in alike for s in (*info.shadows, info.source))
            twins.place(skill, level)
            winners[skill] = SkillInfo(
                id=skill,
                name=str(fm["name"]),
                description=str(fm["description"]),
                source=layer.label,
                source_dir=layer.source_dir,
                scope=scope,
                version=m.version if scope is not None else None,
                digest=m.commit_id,
                files=m.files,
                findings=tuple(m.findings),
                shadows=tuple(dict.fromkeys(below_sources)),
                frontmatter=fm,
                typed=m.typed,
                reader=skills.reader,
                candidate=m is not live and pinned is None,  # effective's new object
                pinned=pinned,
            )
    return [winners[k] for k in sorted(winners)], problems


@dataclass
class _Twins:
    """The winners' names by look-alike key, and the layer each won in: a name placed over a
    lower layer's look-alike removes it, with a `look-alike` problem for operators."""

    winners: dict[str, SkillInfo]
    problems: list[Problem]
    level: dict[str, int] = field(default_factory=dict)
    by_key: dict[str, set[str]] = field(default_factory=dict)

    def place(self, skill: str, level: int) -> None:
        self.level[skill] = level
        self.by_key.setdefault(name_key(skill), set()).add(skill)

    def shadow(self, skill: str, level: int, label: str) -> list[SkillInfo]:
        """Remove the lower layers' winners that look like `skill`; returns them."""
        out: list[SkillInfo] = []
        group = self.by_key.get(name_key(skill), set())
        for other in sorted(group):
            if other == skill or self.level.get(other, level) >= level:
                continue
            group.discard(other)
            info = self.winners.pop(other, None)
            if info is None:
                continue
            out.append(info)
            finding = Finding(
                severity="warning",
                rule="look-alike",
                message=(
                    f"shadowed by {skill!r} of {label}, a name that looks like it (Unicode "
                    "TR39: case, look-alike letters, Unicode forms): a reader could not tell "
                    "them apart, so the upper layer's wins as an equal name would; rename one"
                ),
            )
            self.problems.append(Problem(other, info.source, (finding,)))
        return out


def _origin_disabled(m: Manifest, stacked: Mapping[str, LayerSkills], label: str) -> Problem | None:
    """Why a copy in layer `label` is left out: its origin, a layer of this view, is
    disabled there now."""
    if m.origin is None or m.origin.scope not in stacked:
        return None
    origin = stacked[m.origin.scope].manifests.get(m.origin.skill)
    if origin is None or origin.deleted or not origin.disabled:
        return None
    finding = Finding(
        severity="warning",
        rule="origin-disabled",
        message=(
            f"a copy of {m.origin.scope}/{m.origin.skill}, which an operator disabled "
            f"({origin.disabled_reason or 'no reason given'}): hidden until an operator "
            "enables it for this user"
        ),
    )
    return Problem(m.skill, label, (finding,), disabled=origin.disabled_reason)

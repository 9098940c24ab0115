"""Labels and pins (docs/governance.md, "Labels and pins"): a label names a kept version of a
skill (`stable`, any name an operator picks; `latest` is always the head), and a worker's
pins say which label it is held on, for one skill or for a whole store layer. This module
holds the names and the pins a worker declares; the store keeps the labels in the skill's
manifest (`Manifest.labels`), and `skillfs.governance.pin_rule` resolves a pin."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from skillfs.errors import InvalidArgument
from skillfs.model.manifest import VersionSummary
from skillfs.model.records import Scope

#: The head: the live version (never a stored label). A pin to it holds a worker off canaries.
LATEST = "latest"
#: The most labels one skill carries (each holds its version's file table in the manifest).
MAX_LABELS = 32
#: A pin to every store layer of a worker, in `Pins.layers` and the text form.
EVERY_LAYER = "*"

_LABEL = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")


def check_label(name: object, *, settable: bool = False) -> str:
    """A label name: 1-64 of letters, digits, `.`, `_` and `-`, starting with a letter or a
    digit. `settable`: one an operator may set or remove (`latest` is the head, never set)."""
    if not isinstance(name, str) or not _LABEL.fullmatch(name):
        raise InvalidArgument(
            f"invalid label {name!r}: use 1-64 letters, digits, '.', '_' or '-', starting with "
            "a letter or a digit (e.g. stable, v2-approved)"
        )
    if settable and name == LATEST:
        raise InvalidArgument(
            "the label 'latest' is reserved: it always names the head (the live version); "
            "pick another name, e.g. stable"
        )
    return name


class Pins(BaseModel):
    """Which labelled versions a worker is held on. `layers` maps a store layer's label
    (`shared:A`, `user:A/U`, `market:M`, or `*` for every store layer) to a label, `skills`
    a skill's name to one; a skill's pin beats its layer's, a layer's beats `*`. A skill that
    does not carry the label it is pinned to is served as to a worker without pins (the head,
    or its candidate where a rollout rule gives it); `latest` holds a skill at its head."""

    model_config = ConfigDict(frozen=True)

    layers: tuple[tuple[str, str], ...] = ()
    skills: tuple[tuple[str, str], ...] = ()

    def __init__(
        self, layers: Mapping[str, str] | None = None, skills: Mapping[str, str] | None = None
    ) -> None:
        if not isinstance(layers or {}, Mapping) or not isinstance(skills or {}, Mapping):
            raise InvalidArgument(
                "pins take mappings: Pins(layers={'*': 'stable'}, skills={'pdf': 'stable'})"
            )
        for layer in layers or {}:
            if layer != EVERY_LAYER:
                Scope.parse(layer)
        for skill in skills or {}:
            if not isinstance(skill, str) or not skill:
                raise InvalidArgument(f"invalid pinned skill {skill!r}: give a skill's name")
        for label in [*(layers or {}).values(), *(skills or {}).values()]:
            check_label(label)
        super().__init__(
            layers=tuple(sorted((layers or {}).items())),
            skills=tuple(sorted((skills or {}).items())),
        )

    @classmethod
    def given(cls, value: object) -> Pins:
        """A worker's `pins=`: Pins, a label for every store layer, or None (no pins)."""
        if value is None:
            return cls()
        if isinstance(value, str):
            return cls(layers={EVERY_LAYER: value})
        if not isinstance(value, Pins):
            raise InvalidArgument(
                f"pins={value!r}: give a label (pins='stable') or skillfs.Pins(layers=..., "
                "skills=...)"
            )
        return value

    @classmethod
    def parse(cls, texts: Iterable[str]) -> Pins:
        """Pins from their text form, as the CLI, MCP and the gRPC `View` take them: `LABEL`
        (every store layer), `LAYER=LABEL` (a scope: `market:team=stable`) or `SKILL=LABEL`.
        A target that reads as a scope is a layer."""
        layers: dict[str, str] = {}
        skills: dict[str, str] = {}
        for text in texts:
            target, sep, label = text.rpartition("=")
            if not sep:
                target, label = EVERY_LAYER, text
            elif not target:
                raise InvalidArgument(
                    f"invalid pin {text!r}: give LABEL, LAYER=LABEL or SKILL=LABEL"
                )
            into = layers if target == EVERY_LAYER or _is_scope(target) else skills
            if target in into and into[target] != label:
                raise InvalidArgument(f"{target} is pinned twice ({into[target]}, {label})")
            into[target] = label
        return cls(layers=layers, skills=skills)

    def texts(self) -> list[str]:
        """The text form (`parse` reads it back)."""
        return [
            label if layer == EVERY_LAYER else f"{layer}={label}" for layer, label in self.layers
        ] + [f"{skill}={label}" for skill, label in self.skills]

    def of(self, layer: str, skill: str) -> str | None:
        """The label a skill of `layer` (its label, e.g. `shared:A`) is pinned to, if any."""
        for name, label in self.skills:
            if name == skill:
                return label
        every = None
        for name, label in self.layers:
            if name == layer:
                return label
            if name == EVERY_LAYER:
                every = label
        return every

    def check_layers(self, known: Iterable[str]) -> Pins:
        """Refuse a layer pin naming no store layer of the worker (a typo pins nothing)."""
        labels = set(known)
        for layer, _ in self.layers:
            if layer != EVERY_LAYER and layer not in labels:
                raise InvalidArgument(
                    f"pins: no store layer is labelled {layer!r}; store layers: "
                    f"{', '.join(sorted(labels))}"
                )
        return self

    def __bool__(self) -> bool:
        return bool(self.layers or self.skills)

    def describe(self) -> str:
        """In words, for logs and listings."""
        return ", ".join(self.texts()) or "none"


def labels_by_version(history: Sequence[VersionSummary]) -> dict[int, list[str]]:
    """Version -> the labels naming it now, from a history listed newest first (its newest
    version carries the skill's labels): what history listings show beside each version."""
    out: dict[int, list[str]] = {}
    for name, version in sorted(history[0].labels.items()) if history else ():
        out.setdefault(version, []).append(name)
    return out


def _is_scope(text: str) -> bool:
    try:
        Scope.parse(text)
    except InvalidArgument:
        return False
    return True

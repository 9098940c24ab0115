"""Lean records: slotted, frozen pydantic dataclasses that pydantic validates wherever they
cross the wire or the disk (the same JSON, byte for byte, as `BaseModel`s), while an instance
costs its slots, with no per-instance `__dict__` or fields-set (docs/benchmarks.md,
"Manifests in memory"). `Edge` gives them `BaseModel`'s names for parsing and dumping; the
findings and typed readings that manifests carry live here too."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, TypeAdapter
from pydantic.dataclasses import dataclass

_ADAPTERS: dict[str, TypeAdapter[Any]] = {}


def _adapter(cls: type[Any]) -> TypeAdapter[Any]:
    """The pydantic validator and serializer of a lean record class, made on first use."""
    adapter = _ADAPTERS.get(cls.__qualname__)
    if adapter is None:
        adapter = _ADAPTERS[cls.__qualname__] = TypeAdapter(cls)
    return adapter


class Edge:
    """The pydantic calls the edges make on a lean record (parse, dump, copy with changes),
    under `BaseModel`'s names so callers read the same either way."""

    __slots__ = ()
    __dataclass_fields__: ClassVar[dict[str, Any]]

    @classmethod
    def model_validate_json(cls, raw: bytes | str) -> Self:
        result: Self = _adapter(cls).validate_json(raw)
        return result

    @classmethod
    def model_validate(cls, data: Any) -> Self:
        result: Self = _adapter(cls).validate_python(data)
        return result

    def model_dump_json(self) -> str:
        return _adapter(type(self)).dump_json(self).decode()

    def model_dump(self, *, mode: Literal["json", "python"] = "python") -> dict[str, Any]:
        result: dict[str, Any] = _adapter(type(self)).dump_python(self, mode=mode)
        return result

    def model_copy(self, *, update: dict[str, Any] | None = None) -> Self:
        """A copy with `update`'s fields changed (validated, unlike `BaseModel.model_copy`)."""
        return dataclasses.replace(self, **(update or {}))


@dataclass(frozen=True, slots=True, kw_only=True)
class Finding(Edge):
    """A validation finding: an error breaks the spec, a warning is usable but off-spec."""

    severity: Literal["error", "warning"]
    field: str | None = None
    rule: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Typed(Edge):
    """SKILL.md's frontmatter as a YAML 1.1 safe loader types it (`version: 2.0` a number,
    `disable-model-invocation: false` a boolean): what MCP hosts compare the advertised
    frontmatter with (docs/validation.md, "Two readings"). `refused` says why no host could
    take it as JSON (a date, `.nan`, a scalar YAML 1.1 and 1.2 read apart), and then
    `frontmatter` is None. skillfs.spec.typed reads it."""

    frontmatter: dict[str, Any] | None = None
    refused: str = Field(default="", exclude_if=lambda v: not v)


def error_findings(findings: Iterable[Finding]) -> list[Finding]:
    """The findings that break the spec: what a strict surface refuses (docs/design.md §7)."""
    return [f for f in findings if f.severity == "error"]

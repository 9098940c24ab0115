"""The package's architecture, checked from its source: imports only point down the layers,
the import graph has no cycle, and no hand-written module grows past 600 lines (a signal
that it holds more than one idea).

Every `import` and `from ... import` of every module under skillfs/ is read with `ast`,
including imports inside functions and under `if TYPE_CHECKING:` (a deferred or type-only
import is still a dependency). docs/architecture.md draws the same layers.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "skillfs"
ROOT = Path(__file__).resolve().parents[2] / PACKAGE

# Lowest first. A module's layer is that of its top-level name under skillfs/ (a subpackage
# counts as one: skillfs.remote.wire is in `remote`). Names on one line are one layer and may
# import each other.
LAYERS: list[set[str]] = [
    {"errors", "util"},
    {"model"},
    {"spec"},
    {"engines"},
    {"remote"},
    {"store", "auth"},
    {"governance"},
    {"api"},
    {"runtime", "fs"},
    {"integrations", "mcp"},
    {"console"},
    {"server"},
    {"cli"},
    {"__main__"},
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}

#: A signal that a module holds more than one idea, never a reason to split a class.
MAX_LINES = 600
GENERATED = "skillfs.remote.proto"  # made by `make proto`


# ---------------------------------------------------------------------------- the reader


@dataclass(frozen=True)
class Import:
    """One import statement of `module` naming `target`, a module of the package."""

    module: str  # the importing module, e.g. "skillfs.engines.grpc"
    target: str  # the imported module, e.g. "skillfs.engines.grpc_wire"; "skillfs": the facade
    file: str  # the importing module's file, e.g. "skillfs/engines/grpc.py"
    line: int
    text: str  # the statement, e.g. "from skillfs.server.wire import encode"
    context: str = ""  # "", "inside a function" or "under TYPE_CHECKING"

    @property
    def where(self) -> str:
        at = f" ({self.context})" if self.context else ""
        return f"{self.file}:{self.line}: `{self.text}`{at}"


def _statements(tree: ast.AST) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
    """Every import statement in the tree, with where it sits when that is not module level."""

    def walk(node: ast.AST, context: str) -> Iterator[tuple[ast.Import | ast.ImportFrom, str]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import | ast.ImportFrom):
                yield child, context
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                yield from walk(child, "inside a function")
            elif isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for part in child.body:
                    yield from walk(ast.Module(body=[part], type_ignores=[]), "under TYPE_CHECKING")
                for part in child.orelse:
                    yield from walk(ast.Module(body=[part], type_ignores=[]), context)
            else:
                yield from walk(child, context)

    yield from walk(tree, "")


def modules_of(root: Path, package: str = PACKAGE) -> dict[str, Path]:
    """Every module under `root` (the package's directory) by its dotted name."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = [package, *path.relative_to(root).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _resolve(module: str, is_package: bool, level: int, name: str | None) -> str:
    """The absolute name of `from <level dots><name> import ...` written in `module`."""
    if level == 0:
        return name or ""
    base = module.split(".")
    if not is_package:
        base.pop()  # a plain module's `.` is its package
    if level > 1:
        base = base[: len(base) - (level - 1)]
    return ".".join([*base, name] if name else base)


def imports_of(
    module: str, path: Path, known: set[str], root: Path = ROOT, package: str = PACKAGE
) -> list[Import]:
    """The package modules `module` imports, one entry per (statement, target).

    `from a.b import c` imports module a.b.c when that is a module of the package, else
    module a.b (c is a name in it); so `from skillfs import store` imports skillfs.store and
    `from skillfs import Store` imports the facade. Imports from outside the package are left
    out.
    """
    tree = ast.parse(path.read_text(), str(path))
    file = str(path.relative_to(root.parent))
    is_package = path.name == "__init__.py"
    found: list[Import] = []
    for node, context in _statements(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            base = _resolve(module, is_package, node.level, node.module)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                targets.append(sub if sub in known else base)
        for target in dict.fromkeys(targets):  # once per target, in order
            if target == package or target.startswith(package + "."):
                target = _known_module(target, known)
                found.append(Import(module, target, file, node.lineno, ast.unparse(node), context))
    return found


def _known_module(target: str, known: set[str]) -> str:
    """`import skillfs.a.b.c` where c is a name, not a module: the longest module prefix."""
    while target not in known and "." in target:
        target = target.rpartition(".")[0]
    return target


def all_imports(root: Path = ROOT, package: str = PACKAGE) -> list[Import]:
    modules = modules_of(root, package)
    known = set(modules)
    return [i for m, p in modules.items() for i in imports_of(m, p, known, root, package)]


def unit_of(module: str) -> str:
    """The top-level name a module's layer is read from: skillfs.engines.etcd -> engines."""
    return module.split(".")[1] if "." in module else ""


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (or a module that
    imports itself), as a path m1 -> m2 -> ... -> m1, sorted for a stable report."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1 or v in edges.get(v, ()):
                components.append(component)

    for v in sorted(edges):
        if v not in index:
            connect(v)
    return sorted(_a_cycle_through(sorted(c)[0], c, edges) for c in components)


def _a_cycle_through(start: str, component: set[str], edges: dict[str, set[str]]) -> list[str]:
    """The shortest path start -> ... -> start inside the component (breadth first)."""
    parent: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, set()) & component):
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(parent[path[-1]])
                    return [start, *reversed(path[:-1]), start] if v != start else [start, start]
                if w not in parent:
                    parent[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")


# ------------------------------------------------------------------------ the findings


def upward_imports(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """Rule (a): every import of the facade, or of a module in a layer above the importer's."""
    found = []
    for imp in all_imports(root, package):
        if imp.module == package:
            continue  # the facade re-exports from every layer
        if imp.target == package:
            found.append(
                f"{imp.where}: {imp.module} imports the package facade skillfs/__init__.py;"
                f" rule: modules inside the package import the module that defines a name"
                f" (from skillfs.<module> import ...), never the facade"
            )
            continue
        mine, theirs = unit_of(imp.module), unit_of(imp.target)
        if mine in RANK and theirs in RANK and RANK[theirs] > RANK[mine]:
            found.append(
                f"{imp.where}: {imp.module} (layer {RANK[mine]}: {mine}) imports"
                f" {imp.target} (layer {RANK[theirs]}: {theirs}); rule: imports only point down"
                f" the layers ({' < '.join('/'.join(sorted(names)) for names in LAYERS)})"
            )
    return found


def import_cycles(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """Rule (b): cycles in the import graph of the package's modules (the facade left out:
    importing it is rule (a))."""
    imports = [i for i in all_imports(root, package) if package not in (i.module, i.target)]
    edges: dict[str, set[str]] = {}
    for imp in imports:
        edges.setdefault(imp.module, set()).add(imp.target)
    found = []
    for cycle in cycles(edges):
        steps = []
        for a, b in itertools.pairwise(cycle):
            first = next(i for i in imports if i.module == a and i.target == b)
            steps.append(f"  {first.where}")
        found.append(
            f"import cycle {' -> '.join(cycle)}; rule: the import graph has no cycle (move the"
            f" shared part below both, or pass it in):\n" + "\n".join(steps)
        )
    return found


def long_modules(root: Path = ROOT, package: str = PACKAGE) -> list[str]:
    """Rule (c): hand-written modules over MAX_LINES lines."""
    found = []
    for module, path in modules_of(root, package).items():
        if module.startswith(GENERATED):
            continue
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES:
            found.append(
                f"{path.relative_to(root.parent)}: {lines} lines; rule: no source file over"
                f" {MAX_LINES} lines except the generated skillfs/remote/proto/"
                " (does it hold one idea?)"
            )
    return found


def report(findings: list[str]) -> str:
    return f"{len(findings)} finding(s):\n" + "\n".join(findings)


# ---------------------------------------------------------------------------- the rules


def test_every_module_has_a_layer() -> None:
    unplaced = sorted(
        f"{path.relative_to(ROOT.parent)}: `{unit_of(module)}` is in no layer; add it to"
        " LAYERS in tests/unit/test_layering.py and to the layers of docs/architecture.md"
        for module, path in modules_of(ROOT).items()
        if module != PACKAGE and unit_of(module) not in RANK
    )
    assert not unplaced, report(unplaced)


def test_imports_only_point_down() -> None:
    findings = upward_imports()
    assert not findings, report(findings)


def test_no_import_cycles() -> None:
    findings = import_cycles()
    assert not findings, report(findings)


def test_no_module_over_500_lines() -> None:
    findings = long_modules()
    assert not findings, report(findings)


#: Surfaces reach the store through its methods and namespaces, never its engine: the rules,
#: the retry policy and the checks live above the engine (docs/architecture.md).
NO_ENGINE = ("runtime", "fs", "console", "mcp", "integrations", "cli")


def engine_uses(root: Path) -> list[str]:
    """Every `<something>.engine` attribute read in a module of the surfaces."""
    out = []
    for module, path in modules_of(root).items():
        if unit_of(module) not in NO_ENGINE:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr == "engine":
                out.append(f"{path.relative_to(root.parent)}:{node.lineno}: `.engine`")
    return out


def module_registries(root: Path) -> list[str]:
    """Module-level names bound to a mutable collection or a registry object (a process's
    followers, recorders and watches belong to their store object, not to a module)."""
    mutable = {"dict", "set", "list", "WeakKeyDictionary", "WeakValueDictionary", "WeakSet",
               "defaultdict", "OrderedDict", "Counter", "PerStore"}  # fmt: skip
    out = []
    for module, path in modules_of(root).items():
        if module.startswith(GENERATED):
            continue
        for node in ast.parse(path.read_text()).body:
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            call = value.func if isinstance(value, ast.Call) else None
            name = call.id if isinstance(call, ast.Name) else getattr(call, "attr", None)
            empty = isinstance(value, ast.Dict | ast.Set | ast.List) and not (
                getattr(value, "keys", None) or getattr(value, "elts", None)
            )
            if name in mutable or empty:
                out.append(
                    f"{path.relative_to(root.parent)}:{node.lineno}: a module-level registry"
                )
    return out


#: Module-level collections that hold no state of a store: why each may stay.
REGISTRIES_ALLOWED = {
    "skillfs/engines/memory.py": "`memory://NAME` names one store for the whole process",
    "skillfs/cli/common.py": "the CLI's commands, registered as their modules are imported",
    "skillfs/model/file_entry.py": "file modes interned: one int object per mode",
    "skillfs/model/lean.py": "pydantic adapters, made once per record class",
    "skillfs/model/manifest.py": "the one empty labels map of every manifest without labels",
}


def test_surfaces_never_reach_the_engine() -> None:
    findings = engine_uses(ROOT)
    assert not findings, report(findings)


def test_no_module_level_registry() -> None:
    findings = [f for f in module_registries(ROOT) if f.split(":")[0] not in REGISTRIES_ALLOWED]
    assert not findings, report(findings)


# --------------------------------------------------------------- the reader, on a toy package


def _toy(tmp_path: Path, files: dict[str, str]) -> Path:
    root = tmp_path / PACKAGE
    for name, text in {"__init__.py": "", **files}.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def test_reader_resolves_every_import_form(tmp_path: Path) -> None:
    root = _toy(
        tmp_path,
        {
            "errors.py": "",
            "model.py": "",
            "engines/__init__.py": "from .base import Engine\nfrom . import sqlite\n",
            "engines/base.py": "from ..errors import E\nfrom .. import model\n",
            "engines/sqlite.py": (
                "import os\n"
                "import skillfs.engines.base\n"
                "from skillfs.model import Scope\n"
                "def f():\n"
                "    from skillfs.engines import open_engine\n"
            ),
        },
    )
    got = {(i.module, i.target, i.line, i.context) for i in all_imports(root)}
    assert got == {
        ("skillfs.engines", "skillfs.engines.base", 1, ""),
        ("skillfs.engines", "skillfs.engines.sqlite", 2, ""),  # a submodule, by name
        ("skillfs.engines.base", "skillfs.errors", 1, ""),
        ("skillfs.engines.base", "skillfs.model", 2, ""),
        ("skillfs.engines.sqlite", "skillfs.engines.base", 2, ""),
        ("skillfs.engines.sqlite", "skillfs.model", 3, ""),
        ("skillfs.engines.sqlite", "skillfs.engines", 5, "inside a function"),  # a name in it
    }


def test_reader_reports_the_facade_an_upward_import_and_a_cycle(tmp_path: Path) -> None:
    root = _toy(
        tmp_path,
        {
            "model.py": "from skillfs import Store\nfrom skillfs.store import open_store\n",
            "store.py": "from skillfs import model\n",
            "fs.py": "from skillfs.fs_transaction import T\n",
            "fs_transaction.py": "if TYPE_CHECKING:\n    from skillfs.fs import F\n",
        },
    )
    up = upward_imports(root)
    assert len(up) == 2
    assert "skillfs/model.py:1: `from skillfs import Store`" in up[0] and "facade" in up[0]
    assert up[1].startswith("skillfs/model.py:2: `from skillfs.store import open_store`: ")
    assert "(layer 1: model) imports skillfs.store (layer 5: store)" in up[1]
    found = import_cycles(root)
    assert [f.splitlines()[0].split(";")[0] for f in found] == [
        "import cycle skillfs.fs -> skillfs.fs_transaction -> skillfs.fs",
        "import cycle skillfs.model -> skillfs.store -> skillfs.model",
    ]
    assert (
        "skillfs/fs_transaction.py:2: `from skillfs.fs import F` (under TYPE_CHECKING)" in found[0]
    )


def test_long_modules_leave_generated_code_alone(tmp_path: Path) -> None:
    long = "x = 1\n" * (MAX_LINES + 1)
    root = _toy(tmp_path, {"store.py": long, "remote/proto/pb2.py": "x = 1\n" * 900})
    assert [f.split(":")[0] for f in long_modules(root)] == ["skillfs/store.py"]

"""The console's editor bundle (skillfs/console/static/editor.js) is built by `make
console-assets` from console/assets/ and committed, like the generated protobuf code: its first
line records the SHA-256 of the package-lock.json and the source it was built from, so a bundle
left behind by a change to either fails here, with no node and no network needed. Its licence
notices ship beside it."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ASSETS = ROOT / "console" / "assets"
STATIC = ROOT / "skillfs" / "console" / "static"


def _digest(name: str) -> str:
    return hashlib.sha256((ASSETS / name).read_bytes()).hexdigest()


def test_the_bundle_was_built_from_the_lock_and_source_beside_it() -> None:
    header = (STATIC / "editor.js").read_text().split("\n", 1)[0]
    recorded = dict(re.findall(r"(\S+) sha256:([0-9a-f]{64})", header))
    assert recorded == {
        "package-lock.json": _digest("package-lock.json"),
        "editor.js": _digest("editor.js"),
    }, "skillfs/console/static/editor.js is stale: run `make console-assets` and commit it"


def test_every_dependency_is_pinned_to_the_version_locked() -> None:
    wanted = json.loads((ASSETS / "package.json").read_text())
    locked = json.loads((ASSETS / "package-lock.json").read_text())["packages"]
    for name, version in {**wanted["dependencies"], **wanted["devDependencies"]}.items():
        assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"{name}: pin {version!r} exactly"
        assert locked[f"node_modules/{name}"]["version"] == version, name


def test_the_licence_notices_ship_beside_the_bundle() -> None:
    """Each package the bundle names with its locked version, licence and licence text."""
    notices = (STATIC / "editor.js.THIRD-PARTY.txt").read_text()
    locked = json.loads((ASSETS / "package-lock.json").read_text())["packages"]
    named = re.findall(r"^(\S+) (\d+\.\d+\.\d+) \((\w+)\)$", notices, re.M)
    assert {n for n, _, _ in named} >= {"@codemirror/view", "@codemirror/state", "@lezer/yaml"}
    for name, version, licence in named:
        assert locked[f"node_modules/{name}"]["version"] == version, name
        assert licence == locked[f"node_modules/{name}"]["license"], name
    assert notices.count("Permission is hereby granted") == len(named)

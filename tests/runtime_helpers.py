"""Helpers for the runtime tests: skill files, a call-counting engine, a local Git remote."""

from __future__ import annotations

import os
import subprocess
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import skillfs
from skillfs.engines.base import Engine
from tests.helpers import DESCRIPTION, skill_md


def md(name: str, description: str = DESCRIPTION, body: str = "") -> bytes:
    """The runtime tests' SKILL.md: a `# name` heading, the description YAML-quoted so it may
    hold any character."""
    return skill_md(name, body, description=description, title=True, quote=True)


def view(store: skillfs.Store, user: str) -> dict[str, str]:
    """Skill id -> its SKILL.md body as `user`'s worker of support-bot sees it."""
    with skillfs.Skills(store, "support-bot", user) as sk:
        snap = sk.snapshot()
        return {s.id: snap.read_bytes(s.id, "SKILL.md").decode() for s in snap.skills}


def write_skill(root: Path, name: str, files: Mapping[str, bytes]) -> None:
    for path, data in files.items():
        p = root / name / path
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


def memory_store() -> skillfs.Store:
    return skillfs.open_store(f"memory://{uuid.uuid4().hex}")


@dataclass(frozen=True)
class Call:
    thread: int
    name: str
    args: tuple[Any, ...]


class CountingEngine:
    """Wraps an engine and records every call with its thread, to count store round trips;
    the lookups of what the engine already holds in memory (`known_*`) are not round trips
    and are not recorded."""

    LOCAL = frozenset({"known_manifest", "known_blob"})

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self.calls: list[Call] = []
        self._lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._engine, name)
        if not callable(attr) or name in self.LOCAL:
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.calls.append(Call(threading.get_ident(), name, args))
            return attr(*args, **kwargs)

        return counted

    def names(self, thread: int | None = None) -> list[str]:
        with self._lock:
            return [c.name for c in self.calls if thread is None or c.thread == thread]

    def clear(self) -> None:
        with self._lock:
            self.calls.clear()


def counting_store(url: str | None = None) -> tuple[skillfs.Store, CountingEngine]:
    store = skillfs.open_store(url or f"memory://{uuid.uuid4().hex}")
    counter = CountingEngine(store.engine)
    return skillfs.Store(cast(Engine, counter)), counter


class GitRemote:
    """A bare repository made in the test, with a work tree to commit and push from."""

    def __init__(self, tmp: Path) -> None:
        self.bare = tmp / "origin.git"
        self.work = tmp / "work"
        self._env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.com",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.com",
        }
        self.git("init", "-q", "--bare", "-b", "main", str(self.bare), cwd=tmp)
        self.git("init", "-q", "-b", "main", str(self.work), cwd=tmp)
        self.git("remote", "add", "origin", str(self.bare))

    def git(self, *args: str, cwd: Path | None = None) -> str:
        return subprocess.run(
            ["git", *args],
            cwd=cwd or self.work,
            env=self._env,
            check=True,
            capture_output=True,
            text=True,
        ).stdout

    def commit(self, message: str) -> str:
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        self.git("push", "-q", "origin", "HEAD:main")
        return self.git("rev-parse", "HEAD").strip()

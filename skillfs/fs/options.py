"""What a `skillfs://` filesystem is made of: its options' defaults, its store and its base
(docs/fsspec.md "Options")."""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.core import url_to_fs
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.utils import stringify_path

from skillfs.api import Store, open_store
from skillfs.remote.engine import default_token
from skillfs.store.opening import default_url, file_to_create

ANONYMOUS = "memory://"


def with_defaults(options: dict[str, Any]) -> dict[str, Any]:
    """The options with the $SKILLFS_* defaults filled in (a new dict)."""
    out = dict(options)
    if out.get("store") is None:
        out["store"] = default_url()
    if out.get("token") is None and str(out["store"]).startswith("grpc"):
        # in the instance cache's key: a changed $SKILLFS_TOKEN is a new filesystem
        out["token"] = default_token()
    if out.get("agent_id") is None:
        out["agent_id"] = os.environ.get("SKILLFS_AGENT_ID")
    if "user_id" not in out:
        out["user_id"] = os.environ.get("SKILLFS_USER_ID") or None
    if out.get("base") is None:
        out["base"] = os.getcwd()
    return out


class NoStore(FileNotFoundError):
    """A read of a SQLite store whose file does not exist: most often a mistyped URL."""


@functools.cache
def _anonymous() -> Store:
    """The store `memory://` names for every filesystem of this process. fsspec makes one
    instance per thread (rsync's copies run on its IO thread), so a fresh store per instance
    would lose what they write (docs/fsspec.md "Options")."""
    return open_store(ANONYMOUS)


class LazyStore:
    """The store a filesystem names, opened at its first use. A SQLite file that does not
    exist is not made by reading it (reads raise NoStore, as the CLI's readers refuse it);
    the first write makes it."""

    def __init__(self, store: str | Store, token: str | None = None) -> None:
        self._store = store if isinstance(store, Store) else None
        self._url = "" if isinstance(store, Store) else store
        self._token = token
        self._lock = threading.Lock()
        self._found = False  # known to exist: no more checks

    def check(self) -> None:
        """Raise NoStore when the store is a SQLite file that does not exist (yet)."""
        if self._found:
            return
        path = None if self._store is not None else file_to_create(self._url)
        self._found = path is None
        if path is not None:
            raise NoStore(
                f"no store at {path}: check the URL (sqlite:///relative, sqlite:////absolute) "
                "or write a skill first"
            )

    def missing(self) -> bool:
        try:
            self.check()
        except NoStore:
            return True
        return False

    def get(self) -> Store:
        """The store, opened now if need be (a new SQLite file is made here)."""
        with self._lock:
            if self._store is None:
                url = self._url
                token = {} if self._token is None else {"token": self._token}
                self._store = _anonymous() if url == ANONYMOUS else open_store(url, **token)
            return self._store


def base_fs(base: str | os.PathLike[str] | AbstractFileSystem) -> AbstractFileSystem:
    """An instance as given; a URL or directory as a filesystem rooted there (local: parent
    directories made on write, as object stores imply them)."""
    if isinstance(base, AbstractFileSystem):
        return base
    fs, root = url_to_fs(stringify_path(base))
    if isinstance(fs, LocalFileSystem):
        fs = LocalFileSystem(auto_mkdir=True)
    return DirFileSystem(path=root, fs=fs)


def from_base(info: Any) -> dict[str, Any]:
    """Base names relative to the base root (a rooted filesystem may add a leading '/')."""
    return {**info, "name": str(info["name"]).lstrip("/")}


def tops(paths: list[str]) -> list[str]:
    """Paths without those inside another one of them (removing a directory removes those)."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not out or not p.startswith(out[-1] + "/"):
            out.append(p)
    return out

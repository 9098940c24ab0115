"""`skillfs://`: an agent's skills as files for fsspec, inside its whole workspace
(docs/design.md §5).

Paths under `skills/` are one agent's skills in the store. A filesystem with a `user_id` reads
the user's skills over the agent-shared ones and writes the user's scope; without one it reads
and writes the agent-shared scope. Every other path goes to `base`, another filesystem (a local
directory by default). Directories in the store are implied by files, as on object stores.

A store write publishes its whole skill, built on the version read and rebuilt on `Conflict`,
so concurrent writers of different files of one skill all keep theirs. A bulk call (put, get,
cp, mv, rm, pipe, cat) reads one snapshot and publishes each skill once; `fs.transaction`
commits every store change made inside it with one `store.commit` (skillfs.fs_transaction).
User documentation: docs/fsspec.md.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from glob import has_magic
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.callbacks import DEFAULT_CALLBACK, Callback
from fsspec.core import url_to_fs
from fsspec.implementations.dirfs import DirFileSystem
from fsspec.implementations.local import LocalFileSystem
from fsspec.spec import AbstractBufferedFile, _Cached
from fsspec.utils import isfilelike, stringify_path

from skillfs.engines import default_url
from skillfs.errors import InvalidPath, PermissionDenied
from skillfs.fs_transaction import Batch, Delete, Item, SkillTransaction, SkillView, Write, publish
from skillfs.model import File, FileEntry, Scope
from skillfs.names import check_skill_name, normalize_path
from skillfs.store import Store, open_store
from skillfs.store_blobs import sha256
from skillfs.store_limits import default_mode

Info = dict[str, Any]
SKILLS = "skills"
PREFETCH_BYTES = 64 * 1024 * 1024  # the most a bulk read holds in memory at once


class _WithDefaults(_Cached):  # type: ignore[misc]
    """Fill in the $SKILLFS_* defaults before fsspec keys its instance cache on the arguments,
    so a changed environment gives a new instance and a pickled one reopens the same store."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("store") is None:
            kwargs["store"] = default_url()
        if kwargs.get("agent_id") is None:
            kwargs["agent_id"] = os.environ.get("SKILLFS_AGENT_ID")
        if "user_id" not in kwargs:
            kwargs["user_id"] = os.environ.get("SKILLFS_USER_ID") or None
        if kwargs.get("base") is None:
            kwargs["base"] = os.getcwd()
        return super().__call__(*args, **kwargs)


class SkillFileSystem(AbstractFileSystem, metaclass=_WithDefaults):  # type: ignore[misc]
    """fsspec filesystem over a skillfs store (`skills/`) and a base filesystem (the rest).

    `store`: a store URL or Store ($SKILLFS_STORE, else the embedded SQLite file);
    `agent_id` ($SKILLFS_AGENT_ID, required); `user_id` ($SKILLFS_USER_ID, optional);
    `base`: an fsspec URL or directory (paths are relative to it) or a filesystem instance
    (paths passed unchanged); default the current directory.
    """

    protocol = "skillfs"
    root_marker = ""
    transaction_type = SkillTransaction

    def __init__(
        self,
        *,
        store: str | Store | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        base: str | os.PathLike[str] | AbstractFileSystem | None = None,
        use_listings_cache: bool = False,
        **storage_options: Any,
    ) -> None:
        super().__init__(use_listings_cache=use_listings_cache, **storage_options)
        if not agent_id:
            raise ValueError("skillfs needs an agent: pass agent_id=... or set $SKILLFS_AGENT_ID")
        self.store = store if isinstance(store, Store) else open_store(store)
        self.shared = Scope.shared(agent_id)
        self.scope = Scope.user(agent_id, user_id) if user_id else self.shared
        self.base = _base_fs(os.getcwd() if base is None else base)
        self._local = threading.local()  # the batch in progress, per thread

    def start_transaction(self) -> SkillTransaction:
        """fsspec's non-context form; `end_transaction()` commits."""
        transaction: SkillTransaction = super().start_transaction()
        transaction.start()
        return transaction

    # ------------------------------------------------------------------ paths

    @classmethod
    def _strip_protocol(cls, path: Any) -> Any:
        if isinstance(path, list):
            return [cls._strip_protocol(p) for p in path]
        text: str = stringify_path(path)
        for prefix in ("skillfs://", "skillfs::"):
            text = text.removeprefix(prefix)
        return text.strip("/")

    def _split(self, path: str) -> tuple[str, str] | None:
        """(skill, path inside it) for a store path, ("", "") for skills/ itself; None for base."""
        return _parse(self._strip_protocol(path))

    def _file(self, path: str) -> tuple[str, str]:
        """The (skill, path) a store write goes to; InvalidPath when that is not a skill's file."""
        where = self._split(path)
        if where is None or not where[1]:
            raise InvalidPath(
                f"cannot write {self._strip_protocol(path)!r}: a file directly under skills/ is "
                "not allowed, every file belongs to a skill directory (skills/<skill>/SKILL.md)"
            )
        return where

    # ------------------------------------------------------------------ reading the store

    @property
    def _batch_now(self) -> Batch | None:
        batch: Batch | None = getattr(self._local, "batch", None)
        return batch

    def _read(self, names: Sequence[str] | None) -> dict[str, SkillView]:
        """Every named skill (None: every existing one), the user's over the shared ones."""
        own = self.store.manifests(self.scope, names)
        out = {
            n: SkillView(n, self.scope, m.version, m.version, dict(m.files)) for n, m in own.items()
        }
        if self.scope.kind == "user":
            rest = None if names is None else [n for n in names if n not in own]
            if rest is None or rest:
                for n, m in self.store.manifests(self.shared, rest).items():
                    out.setdefault(n, SkillView(n, self.shared, m.version, 0, dict(m.files)))
        for n in names or ():
            out.setdefault(n, SkillView(n, None, 0, 0, {}))
        return out

    def _skills(self, names: Sequence[str] | None = None) -> dict[str, SkillView]:
        """Like _read, but inside a batch from (and into) its snapshot."""
        batch = self._batch_now
        if batch is None:
            return self._read(names)
        if names is None and not batch.complete:
            for n, sk in self._read(None).items():
                if n not in batch.skills or not batch.skills[n].edits:
                    batch.skills[n] = sk
            batch.complete = True
        if names is None:
            return batch.skills
        missing = [n for n in names if n not in batch.skills]
        if missing and batch.complete:
            batch.skills.update({n: SkillView(n, None, 0, 0, {}) for n in missing})
        elif missing:
            batch.skills.update(self._read(missing))
        return {n: batch.skills[n] for n in names}

    def _skill(self, name: str) -> SkillView:
        return self._skills([name])[name]

    def _resolve(self, path: str) -> tuple[SkillView | None, Item | None]:
        """(skill, file) at a store path, file None for a directory, skill None for skills/."""
        skill, rel = self._split(path) or ("", "")
        if not skill:
            return None, None
        sk = self._skill(skill)
        item = sk.files.get(rel) if rel else None
        if item is None and not any(not rel or p.startswith(rel + "/") for p in sk.files):
            raise FileNotFoundError(self._strip_protocol(path))
        return sk, item

    def _data(self, item: Item, start: int | None = None, end: int | None = None) -> bytes:
        """A file's bytes or the range [start, end) (negative counts from the end), reading
        only the chunks the range covers."""
        size = item.size if isinstance(item, FileEntry) else len(item.data)
        lo = 0 if start is None else max(0, size + start) if start < 0 else min(start, size)
        hi = size if end is None else max(0, size + end) if end < 0 else min(end, size)
        if isinstance(item, File):
            return item.data[lo:hi]
        batch = self._batch_now
        cached = batch.blobs.get(item.sha256) if batch else None
        if cached is not None:
            return cached[lo:hi]
        return self.store.read_entry(item, lo, hi)  # b"" for an empty range

    def _prefetch(self, paths: Any, recursive: bool, maxdepth: int | None) -> None:
        """Fetch the stored files a bulk read will want in one batched round trip."""
        batch = self._batch_now
        assert batch is not None
        try:
            names = self.expand_path(paths, recursive=recursive, maxdepth=maxdepth)
        except FileNotFoundError:
            return  # the bulk call itself reports it
        wanted: list[FileEntry] = []
        budget = PREFETCH_BYTES
        for name in names:
            if self._split(name) is None:
                continue
            try:
                _, item = self._resolve(name)
            except FileNotFoundError:
                continue  # the bulk call reports it as its on_error says
            if isinstance(item, FileEntry) and item.size <= budget:
                wanted.append(item)
                budget -= item.size
        batch.blobs.update(self.store.read_entries(wanted))

    # ------------------------------------------------------------------ writing the store

    @contextmanager
    def _batch(self, together: bool = False) -> Iterator[Batch]:
        """Stage store changes until the outermost batch ends, then commit them (each skill
        once; all in one commit when `together`). Nothing is written if it raises."""
        outer = self._batch_now
        if outer is not None:
            yield outer
            return
        batch = Batch(together)
        self._local.batch = batch
        try:
            yield batch
        finally:
            self._local.batch = None
        self._commit(batch)

    def _commit(self, batch: Batch) -> None:
        touched = [sk for sk in batch.skills.values() if sk.edits]
        for group in [touched] if batch.together else [[sk] for sk in touched]:
            publish(self.store, self.scope, group, self._read)
        if touched:
            self.invalidate_cache()

    def _write(
        self, path: str, content: bytes | Item, *, exclusive: bool = False, perm: int | None = None
    ) -> None:
        """Stage (or, outside a batch, publish) one file. New content without a known mode
        keeps the mode of the file it replaces, else gets the store's default."""
        skill, rel = self._file(path)
        with self._batch():
            sk = self._skill(skill)
            _check_write(sk, rel, exclusive)
            now = time.time()
            if isinstance(content, bytes):
                old = sk.files.get(rel)
                mode = perm if perm is not None else old.mode if old else None
                item: Item = File(
                    content, default_mode(rel, content) if mode is None else mode, now
                )
            else:
                item = content.model_copy(update={"mtime": now})
            sk.apply(Write(rel, item, exclusive))

    def _remove(self, path: str) -> None:
        """Stage the removal of a store file (inside a batch)."""
        sk, item = self._resolve(path)
        if sk is None or item is None:
            raise IsADirectoryError(self._strip_protocol(path))
        if sk.scope != self.scope and not sk.written:
            raise PermissionDenied(
                f"{self._strip_protocol(path)} is in {self.shared}, which this filesystem for "
                f"{self.scope} can read but not change: remove it with a filesystem without "
                "user_id, or write to the skill first to make the user's own copy"
            )
        sk.apply(Delete(self._file(path)[1]))

    # ------------------------------------------------------------------ listing

    def _file_info(self, name: str, sk: SkillView, item: Item) -> Info:
        if isinstance(item, FileEntry):
            sha, size = item.sha256, item.size
        else:
            sha, size = sha256(item.data), len(item.data)
        return {
            "name": name,
            "size": size,
            "type": "file",
            "sha256": sha,
            "version": sk.version,
            "mtime": item.mtime,
            "mode": stat.S_IFREG | (item.mode or 0),  # st_mode, as LocalFileSystem reports it
            "scope": str(sk.scope or self.scope),
        }

    def _tree(self, path: str, maxdepth: int | None, withdirs: bool) -> dict[str, Info]:
        """Store files below `path` (and with `withdirs` the directories they imply)."""
        skill, rel = self._split(path) or ("", "")
        out: dict[str, Info] = {}
        for sk in [self._skill(skill)] if skill else self._skills().values():
            root = f"{SKILLS}/{sk.name}"
            if sk.files and not skill and withdirs:
                out[root] = _dir(root, sk)
            for p, item in sk.files.items():
                if rel and not p.startswith(rel + "/"):
                    continue
                name = f"{root}/{p}"
                parts = name[len(path) + 1 :].split("/")
                if maxdepth is None or len(parts) <= maxdepth:
                    out[name] = self._file_info(name, sk, item)
                depth = len(parts) if maxdepth is None else min(len(parts), maxdepth + 1)
                for i in range(1, depth if withdirs else 1):
                    parent = f"{path}/{'/'.join(parts[:i])}"
                    out.setdefault(parent, _dir(parent))
        return out

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Info] | list[str]:
        path = self._strip_protocol(path)
        if not path:
            try:
                base = [_from_base(i) for i in self.base.ls("", detail=True)]
            except FileNotFoundError:
                base = []
            out = [_dir(SKILLS), *(i for i in base if i["name"] != SKILLS)]
        elif self._split(path) is None:
            out = [_from_base(i) for i in self.base.ls(path, detail=True, **kwargs)]
        else:
            cached = None if kwargs.get("refresh") else self.dircache.get(path)
            out = cached if cached is not None else self._store_ls(path)
        out = sorted(out, key=lambda i: str(i["name"]))
        return out if detail else [i["name"] for i in out]

    def _store_ls(self, path: str) -> list[Info]:
        sk, item = self._resolve(path)
        if sk is not None and item is not None:
            return [self._file_info(path, sk, item)]
        out = list(self._tree(path, 1, True).values())
        self.dircache[path] = out
        return out

    def info(self, path: str, **kwargs: Any) -> Info:
        path = self._strip_protocol(path)
        if not path:
            return _dir("")
        if self._split(path) is None:
            return _from_base(self.base.info(path, **kwargs))
        if self.dircache.use_listings_cache:
            try:
                listing = self.dircache[self._parent(path)]
            except KeyError:
                pass
            else:
                for i in listing:
                    if i["name"] == path:
                        return dict(i)
                raise FileNotFoundError(path)
        sk, item = self._resolve(path)
        if sk is None:
            return _dir(SKILLS)
        if item is None:
            return _dir(path, sk if path == f"{SKILLS}/{sk.name}" else None)
        return self._file_info(path, sk, item)

    def find(
        self,
        path: str,
        maxdepth: int | None = None,
        withdirs: bool = False,
        detail: bool = False,
        **kwargs: Any,
    ) -> list[str] | dict[str, Info]:
        if maxdepth is not None and maxdepth < 1:
            raise ValueError("maxdepth must be at least 1")
        path = self._strip_protocol(path)
        out: dict[str, Info] = {}
        if not path or self._split(path) is None:
            try:
                found = self.base.find(path, maxdepth, withdirs=withdirs, detail=True, **kwargs)
            except FileNotFoundError:
                found = {}
            for info in found.values():
                info = _from_base(info)
                if path or (info["name"] and info["name"].split("/")[0] != SKILLS):
                    out[info["name"]] = info
        if not path:
            if withdirs:
                out[SKILLS] = _dir(SKILLS)
            if maxdepth is None or maxdepth > 1:
                out.update(self._tree(SKILLS, None if maxdepth is None else maxdepth - 1, withdirs))
        elif self._split(path) is not None:
            with self._batch():  # one snapshot for the path and its files
                try:
                    here: Info | None = self.info(path)
                except FileNotFoundError:
                    here = None
                if here is not None and here["type"] == "file":
                    out[path] = here
                elif here is not None:
                    out = self._tree(path, maxdepth, withdirs)
                    if withdirs:
                        out[path] = here
        names = sorted(out)
        return {n: out[n] for n in names} if detail else names

    def du(
        self,
        path: str,
        total: bool = True,
        maxdepth: int | None = None,
        withdirs: bool = False,
        **kwargs: Any,
    ) -> int | dict[str, int]:
        """Sizes from one listing (fsspec's default asks info() once per file)."""
        found = self.find(path, maxdepth=maxdepth, withdirs=withdirs, detail=True, **kwargs)
        assert isinstance(found, dict)
        sizes = {n: int(i.get("size") or 0) for n, i in found.items()}
        return sum(sizes.values()) if total else sizes

    def ukey(self, path: str) -> str:
        """The content hash: equal keys mean equal bytes."""
        path = self._strip_protocol(path)
        if self._split(path) is None:
            return str(self.base.ukey(path))
        info = self.info(path)
        return str(info["sha256"]) if info["type"] == "file" else str(super().ukey(path))

    def checksum(self, path: str) -> int:
        return int(self.ukey(path), 16)

    def modified(self, path: str) -> datetime:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            return self.base.modified(path)  # type: ignore[no-any-return]
        info = self.info(path)
        if info["type"] != "file":
            raise IsADirectoryError(f"{path} is a directory implied by its files: no mtime")
        return datetime.fromtimestamp(info["mtime"], UTC)

    def invalidate_cache(self, path: str | None = None) -> None:
        self.dircache.clear()
        super().invalidate_cache(path)

    # ------------------------------------------------------------------ reading and writing

    def cat_file(
        self, path: str, start: int | None = None, end: int | None = None, **kwargs: Any
    ) -> bytes:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            return self.base.cat_file(path, start, end, **kwargs)  # type: ignore[no-any-return]
        _, item = self._resolve(path)
        if item is None:
            raise IsADirectoryError(path)
        return self._data(item, start, end)

    def cat(
        self, path: Any, recursive: bool = False, on_error: str = "raise", **kwargs: Any
    ) -> Any:
        with self._batch():
            self._prefetch(path, recursive, None)
            return super().cat(path, recursive=recursive, on_error=on_error, **kwargs)

    def cat_ranges(self, *args: Any, **kwargs: Any) -> list[bytes | Exception]:
        """One manifest read per skill; each range reads only the chunks it covers."""
        with self._batch():
            return super().cat_ranges(*args, **kwargs)  # type: ignore[no-any-return]

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.pipe_file(path, value, mode=mode, **kwargs)
        else:
            self._write(path, bytes(value), exclusive=mode == "create")

    def pipe(self, path: Any, value: bytes | None = None, **kwargs: Any) -> None:
        with self._batch():
            super().pipe(path, value, **kwargs)

    def _open(
        self,
        path: str,
        mode: str = "rb",
        block_size: int | None = None,
        autocommit: bool = True,
        cache_options: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> Any:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            return self.base.open(path, mode, block_size, cache_options, **kwargs)
        if mode == "rb":
            sk, item = self._resolve(path)
            if sk is None or item is None:
                raise IsADirectoryError(path)
            return _StoreFile(
                self, path, mode, block_size, cache_options, item, self._file_info(path, sk, item)
            )
        if mode in ("wb", "xb"):
            skill, rel = self._file(path)
            _check_write(self._skill(skill), rel, mode == "xb")
            return _StoreFile(self, path, mode, block_size, cache_options)
        raise ValueError(
            f"mode {mode!r} is not supported for {path}: a skill file is read ('rb') "
            "or written whole ('wb', or 'xb' to create it exclusively)"
        )

    def put_file(
        self,
        lpath: str,
        rpath: str,
        callback: Callback = DEFAULT_CALLBACK,
        mode: str = "overwrite",
        **kwargs: Any,
    ) -> None:
        rpath = self._strip_protocol(rpath)
        if self._split(rpath) is None:
            self.base.put_file(lpath, rpath, callback=callback, mode=mode, **kwargs)
        elif not os.path.isdir(lpath):  # directories are implied by the files put
            with open(lpath, "rb") as f:
                data = f.read()
            callback.set_size(len(data))
            perm = os.stat(lpath).st_mode & 0o777
            self._write(rpath, data, exclusive=mode == "create", perm=perm)
            callback.relative_update(len(data))

    def put(self, lpath: Any, rpath: Any, recursive: bool = False, **kwargs: Any) -> None:
        with self._batch():
            super().put(lpath, rpath, recursive=recursive, **kwargs)

    def get_file(
        self,
        rpath: str,
        lpath: Any,
        callback: Callback = DEFAULT_CALLBACK,
        outfile: Any = None,
        **kwargs: Any,
    ) -> None:
        rpath = self._strip_protocol(rpath)
        if self._split(rpath) is None:
            self.base.get_file(rpath, lpath, callback=callback, outfile=outfile, **kwargs)
            return
        _, item = self._resolve(rpath)
        target = outfile if outfile is not None else lpath if isfilelike(lpath) else None
        if item is None:
            if target is None:
                os.makedirs(lpath, exist_ok=True)
            return
        data = self._data(item)
        callback.set_size(len(data))
        if target is not None:
            target.write(data)
        else:
            os.makedirs(os.path.dirname(os.path.abspath(lpath)), exist_ok=True)
            with open(lpath, "wb") as f:
                f.write(data)
            if item.mode is not None:
                os.chmod(lpath, item.mode)
        callback.relative_update(len(data))

    def get(self, rpath: Any, lpath: Any, recursive: bool = False, **kwargs: Any) -> None:
        with self._batch():
            self._prefetch(rpath, recursive, kwargs.get("maxdepth"))
            super().get(rpath, lpath, recursive=recursive, **kwargs)

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        to_base = self._split(path2) is None
        if self._split(path1) is None:
            if to_base:
                self.base.cp_file(path1, path2, **kwargs)
            elif self.base.isfile(path1):
                mode = self.base.info(path1).get("mode")
                perm = mode & 0o777 if isinstance(mode, int) else None
                self._write(path2, self.base.cat_file(path1), perm=perm)
            elif not self.base.isdir(path1):
                raise FileNotFoundError(path1)
            return
        _, item = self._resolve(path1)
        if item is None:  # a directory: implied in the store, made in base
            if to_base:
                self.base.makedirs(path2, exist_ok=True)
        elif to_base:
            self.base.pipe_file(path2, self._data(item))
        else:
            self._write(path2, item)

    def copy(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> None:
        with self._batch():
            super().copy(path1, path2, recursive=recursive, **kwargs)

    def mv(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> None:
        """A move inside the store is one commit: a rename inside a skill is one publish, a
        renamed skill directory one commit of the new skill and the removal of the old."""
        if all(isinstance(p, str) and _plain_base(self, p) for p in (path1, path2)):
            self.base.mv(
                self._strip_protocol(path1),
                self._strip_protocol(path2),
                recursive=recursive,
                **kwargs,
            )
            return
        with self._batch(together=True):
            super().mv(path1, path2, recursive=recursive, **kwargs)

    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.rm_file(path)
        else:
            with self._batch():
                self._remove(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Store files are removed per skill in one publish each; directories are implied,
        so removing one removes nothing by itself."""
        base: list[str] = []
        with self._batch():
            for p in self._strip_protocol([path] if isinstance(path, str) else list(path)):
                if _plain_base(self, p):
                    base.append(p)
                    continue
                found = self.expand_path(p, recursive=recursive, maxdepth=maxdepth)
                base += [q for q in found if q and self._split(q) is None]
                store = [q for q in found if self._split(q) is not None]
                for q in [q for q in store if self._resolve(q)[1] is not None]:
                    self._remove(q)
            if base:
                self.base.rm(_tops(base), recursive=recursive, maxdepth=maxdepth)

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Store directories are implied by their files: only the path is checked."""
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.mkdir(path, create_parents=create_parents, **kwargs)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.makedirs(path, exist_ok=exist_ok)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.rmdir(path)


class _StoreFile(AbstractBufferedFile):  # type: ignore[misc]
    """A store file. Reads stay on the content opened, whatever is published meanwhile; a
    write publishes the skill on close, and nothing when its `with` block raises."""

    def __init__(
        self,
        fs: SkillFileSystem,
        path: str,
        mode: str,
        block_size: int | None,
        cache_options: dict[str, Any] | None,
        item: Item | None = None,
        info: Info | None = None,
    ) -> None:
        self.item = item
        size = info["size"] if info else None
        super().__init__(
            fs, path, mode, block_size or "default", cache_options=cache_options, size=size
        )
        if info is not None:
            self.details = info

    def _fetch_range(self, start: int, end: int) -> bytes:
        assert self.item is not None
        return self.fs._data(self.item, start, end)  # type: ignore[no-any-return]

    def _upload_chunk(self, final: bool = False) -> bool:
        if not final:
            return False  # keep buffering: a skill file is published whole
        self.fs._write(self.path, self.buffer.getvalue(), exclusive=self.mode == "xb")
        return True

    def commit(self) -> None:
        self.close()

    def discard(self) -> None:
        self.closed = True

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if exc_type is not None and self.writable():
            self.discard()
        self.close()


@functools.lru_cache(maxsize=4096)
def _parse(path: str) -> tuple[str, str] | None:
    """SkillFileSystem._split of a stripped path, checked once per distinct path."""
    if path != SKILLS and not path.startswith(SKILLS + "/"):
        return None
    parts = path.split("/", 2)
    try:
        skill = check_skill_name(parts[1]) if len(parts) > 1 else ""
        return skill, normalize_path(parts[2]) if len(parts) > 2 else ""
    except InvalidPath as exc:
        raise InvalidPath(f"invalid path {path!r}: {exc}") from None


def _check_write(sk: SkillView, rel: str, exclusive: bool) -> None:
    """The errors a local filesystem would give, before anything is staged."""
    where = f"skills/{sk.name}/{rel}"
    parts = rel.split("/")
    for i in range(1, len(parts)):
        if "/".join(parts[:i]) in sk.files:
            raise NotADirectoryError(
                f"cannot write {where}: skills/{sk.name}/{'/'.join(parts[:i])} is a file"
            )
    if any(p.startswith(rel + "/") for p in sk.files):
        raise IsADirectoryError(f"cannot write {where}: it is a directory")
    if exclusive and rel in sk.files:
        raise FileExistsError(f"{where} exists (exclusive create)")


def _dir(name: str, sk: SkillView | None = None) -> Info:
    info: Info = {"name": name, "size": 0, "type": "directory"}
    if sk is not None:
        info.update(version=sk.version, scope=str(sk.scope))
    return info


def _from_base(info: Info) -> Info:
    """Base names relative to the base root (a rooted filesystem may add a leading '/')."""
    return {**info, "name": str(info["name"]).lstrip("/")}


def _plain_base(fs: SkillFileSystem, path: str) -> bool:
    """A base path that no glob could stretch into skills/."""
    path = fs._strip_protocol(path)
    return bool(path) and not has_magic(path.split("/")[0]) and fs._split(path) is None


def _tops(paths: list[str]) -> list[str]:
    """Paths without those inside another one of them (removing a directory removes those)."""
    out: list[str] = []
    for p in sorted(set(paths)):
        if not out or not p.startswith(out[-1] + "/"):
            out.append(p)
    return out


def _base_fs(base: str | os.PathLike[str] | AbstractFileSystem) -> AbstractFileSystem:
    """An instance as given; a URL or directory as a filesystem rooted there (local: parent
    directories made on write, as object stores imply them)."""
    if isinstance(base, AbstractFileSystem):
        return base
    fs, root = url_to_fs(stringify_path(base))
    if isinstance(fs, LocalFileSystem):
        fs = LocalFileSystem(auto_mkdir=True)
    return DirFileSystem(path=root, fs=fs)

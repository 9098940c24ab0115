"""`skillfs://`: an agent's skills as files for fsspec, inside its whole workspace
(docs/design.md §5).

Paths under `skills/` are one agent's skills in the store. A filesystem with a `user_id` reads
the user's skills over the agent-shared ones and writes the user's scope; without one it reads
and writes the agent-shared scope. Every other path goes to `base`, another filesystem (a local
directory by default). Directories in the store are implied by files, as on object stores.

A store write publishes its whole skill, built on the version read and rebuilt on `Conflict`,
so concurrent writers of different files of one skill all keep theirs. A bulk call (put, get,
cp, mv, rm, pipe, cat) reads one snapshot and publishes each skill once; `fs.transaction`
commits every store change made inside it with one `store.commit` (skillfs.fs.transaction).
User documentation: docs/fsspec.md.
"""

from __future__ import annotations

import errno
import itertools
import logging
import os
import time
from datetime import UTC, datetime
from glob import has_magic
from typing import Any

from fsspec import AbstractFileSystem
from fsspec.callbacks import DEFAULT_CALLBACK, Callback
from fsspec.spec import _Cached
from fsspec.utils import isfilelike, stringify_path

from skillfs.api import Store
from skillfs.errors import Conflict, NotFound
from skillfs.fs.file import CompressedWrite, StoreFile, TextWrite
from skillfs.fs.options import LazyStore, base_fs, from_base, tops, with_defaults
from skillfs.fs.transaction import Batches, SkillTransaction
from skillfs.fs.tree import SKILLS, Info, SkillTree, dir_info, split, target
from skillfs.model import Scope
from skillfs.model.names import unwritable
from skillfs.model.ops import WriteOptions
from skillfs.store.who import check_message
from skillfs.util.backoff import pause
from skillfs.util.deadline import deadline

log = logging.getLogger(__name__)


class _WithDefaults(_Cached):  # type: ignore[misc]
    """Fill in the $SKILLFS_* defaults before fsspec keys its instance cache on the arguments,
    so a changed environment gives a new instance and a pickled one reopens the same store."""

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return super().__call__(*args, **with_defaults(kwargs))


class SkillFileSystem(Batches, AbstractFileSystem, metaclass=_WithDefaults):  # type: ignore[misc]
    """fsspec filesystem over a skillfs store (`skills/`) and a base filesystem (the rest).

    `store`: a store URL or Store ($SKILLFS_STORE, else the embedded SQLite file);
    `agent_id` ($SKILLFS_AGENT_ID, required); `user_id` ($SKILLFS_USER_ID, optional);
    `base`: an fsspec URL or directory (paths are relative to it) or a filesystem instance
    (paths passed unchanged); default the current directory; `token`: a grpc:// store's
    bearer token ($SKILLFS_TOKEN).
    """

    protocol = "skillfs"
    root_marker = ""
    transaction_type = SkillTransaction
    #: The skills a running `get` skipped, with why (None: no `get` is running).
    _skipped: dict[str, str] | None = None

    def __init__(
        self,
        *,
        store: str | Store | None = None,
        agent_id: str | None = None,
        user_id: str | None = None,
        base: str | os.PathLike[str] | AbstractFileSystem | None = None,
        use_listings_cache: bool = False,
        token: str | None = None,
        message: str = "",
        **storage_options: Any,
    ) -> None:
        super().__init__(use_listings_cache=use_listings_cache, **storage_options)
        if not agent_id:
            raise ValueError("skillfs needs an agent: pass agent_id=... or set $SKILLFS_AGENT_ID")
        assert store is not None  # _WithDefaults filled it in
        self._store = LazyStore(store, token)
        self.shared = Scope.shared(agent_id)
        self.scope = Scope.user(agent_id, user_id) if user_id else self.shared
        self.base = base_fs(os.getcwd() if base is None else base)
        self._skills = SkillTree(
            self._store, self.scope, self.shared, self.invalidate_cache, check_message(message)
        )

    @property
    def store(self) -> Store:
        """The store (a SQLite file that does not exist yet is made now)."""
        return self._store.get()

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
        return split(self._strip_protocol(path))

    def _prefetch(self, paths: Any, recursive: bool, maxdepth: int | None) -> None:
        """Fetch the stored files a bulk read will want in one batched round trip."""
        try:
            names = self.expand_path(paths, recursive=recursive, maxdepth=maxdepth)
        except FileNotFoundError:
            return  # the bulk call itself reports it
        self._skills.prefetch([n for n in names if self._split(n) is not None])

    def ls(self, path: str, detail: bool = True, **kwargs: Any) -> list[Info] | list[str]:
        path = self._strip_protocol(path)
        if not path:
            try:
                base = [from_base(i) for i in self.base.ls("", detail=True)]
            except FileNotFoundError:
                base = []
            out = [dir_info(SKILLS), *(i for i in base if i["name"] != SKILLS)]
        elif self._split(path) is None:
            out = [from_base(i) for i in self.base.ls(path, detail=True, **kwargs)]
        else:
            fresh = kwargs.get("refresh") or self._skills.staging  # staged: not the store's
            cached = None if fresh else self.dircache.get(path)
            out = cached if cached is not None else self._store_ls(path)
        out = sorted(out, key=lambda i: str(i["name"]))
        return out if detail else [i["name"] for i in out]

    def _store_ls(self, path: str) -> list[Info]:
        sk, item = self._skills.resolve(path)
        if sk is not None and item is not None:
            return [self._skills.file_info(path, sk, item)]
        out = list(self._skills.listing(path, 1, True).values())
        if not self._skills.staging:
            self.dircache[path] = out
        return out

    def info(self, path: str, **kwargs: Any) -> Info:
        path = self._strip_protocol(path)
        if not path:
            return dir_info("")
        if self._split(path) is None:
            return from_base(self.base.info(path, **kwargs))
        if self.dircache.use_listings_cache and not self._skills.staging:
            try:
                listing = self.dircache[self._parent(path)]
            except KeyError:
                pass
            else:
                for i in listing:
                    if i["name"] == path:
                        return dict(i)
                raise FileNotFoundError(path)
        sk, item = self._skills.resolve(path)
        if sk is None:
            return dir_info(SKILLS)
        if item is None:
            return dir_info(path, sk if path == f"{SKILLS}/{sk.name}" else None)
        return self._skills.file_info(path, sk, item)

    def check_store(self, path: Any) -> None:
        """NoStore (a FileNotFoundError) when a store path is asked of a SQLite store whose
        file does not exist: said, where fsspec would take it for a missing path."""
        paths = [path] if isinstance(path, str) else list(path)
        if any(self._split(p) is not None for p in paths):
            self._store.check()

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
                info = from_base(info)
                if path or (info["name"] and info["name"].split("/")[0] != SKILLS):
                    out[info["name"]] = info
        if not path:
            if withdirs:
                out[SKILLS] = dir_info(SKILLS)
            if maxdepth is None or maxdepth > 1:
                depth = None if maxdepth is None else maxdepth - 1
                out.update(self._skills.listing(SKILLS, depth, withdirs))
        elif self._split(path) is not None:
            with self._skills.batching():  # one snapshot for the path and its files
                try:
                    here: Info | None = self.info(path)
                except FileNotFoundError:
                    here = None
                if here is not None and here["type"] == "file":
                    out[path] = here
                elif here is not None:
                    out = self._skills.listing(path, maxdepth, withdirs)
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
        _, item = self._skills.resolve(path)
        if item is None:
            raise IsADirectoryError(path)
        return self._skills.data(item, start, end)

    def cat(
        self, path: Any, recursive: bool = False, on_error: str = "raise", **kwargs: Any
    ) -> Any:
        self.check_store(path)
        with self._skills.batching():
            self._prefetch(path, recursive, None)
            return super().cat(path, recursive=recursive, on_error=on_error, **kwargs)

    def cat_ranges(self, *args: Any, **kwargs: Any) -> list[bytes | Exception]:
        """One manifest read per skill; each range reads only the chunks it covers."""
        with self._skills.batching():
            return super().cat_ranges(*args, **kwargs)  # type: ignore[no-any-return]

    def pipe_file(self, path: str, value: bytes, mode: str = "overwrite", **kwargs: Any) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.pipe_file(path, value, mode=mode, **kwargs)
        else:
            self._skills.write(path, bytes(value), exclusive=mode == "create")

    def pipe(self, path: Any, value: bytes | None = None, **kwargs: Any) -> None:
        with self._skills.batching():
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
            sk, item = self._skills.resolve(path)
            if sk is None or item is None:
                raise IsADirectoryError(path)
            info = self._skills.file_info(path, sk, item)
            return StoreFile(self, self._skills, path, mode, block_size, cache_options, item, info)
        if mode in ("wb", "xb"):
            skill, rel = target(path)
            self._skills.skill(skill).check_write(rel, mode == "xb")
            return StoreFile(self, self._skills, path, mode, block_size, cache_options)
        raise ValueError(
            f"mode {mode!r} is not supported for {path}: a skill file is read ('rb') "
            "or written whole ('wb', or 'xb' to create it exclusively)"
        )

    def open(
        self,
        path: Any,
        mode: str = "rb",
        block_size: int | None = None,
        cache_options: dict[str, Any] | None = None,
        compression: str | None = None,
        **kwargs: Any,
    ) -> Any:
        """As fsspec's, but a store write in text mode or compressed publishes nothing when
        its `with` block raises, as a binary one (docs/fsspec.md "Writing")."""
        if "r" in mode or self._split(path) is None:
            return super().open(path, mode, block_size, cache_options, compression, **kwargs)
        if "b" not in mode:
            text = {k: kwargs.pop(k) for k in ("encoding", "errors", "newline") if k in kwargs}
            binary = mode.replace("t", "") + "b"
            raw = self.open(path, binary, block_size, cache_options, compression, **kwargs)
            return TextWrite(raw, **text)
        f = super().open(path, mode, block_size, cache_options, **kwargs)
        return f if compression is None else CompressedWrite(f.path, f, compression)

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
            self._skills.write(rpath, data, exclusive=mode == "create", perm=perm)
            callback.relative_update(len(data))

    def put(self, lpath: Any, rpath: Any, recursive: bool = False, **kwargs: Any) -> None:
        with self._skills.batching():
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
        sk, item = self._skills.resolve(rpath)
        target = outfile if outfile is not None else lpath if isfilelike(lpath) else None
        if sk is not None and target is None and self._unwritable(sk.name, sk.files):
            return  # a path stored before the caps: the skill is skipped, not the whole get
        if item is None:
            if target is None:
                os.makedirs(lpath, exist_ok=True)
            return
        data = self._skills.data(item)
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
        """Copy to local files; a skill with a path stored before the path caps, longer or
        deeper than a file system holds, is skipped with one warning naming it."""
        self.check_store(rpath)
        self._skipped = {}
        try:
            with self._skills.batching():
                self._prefetch(rpath, recursive, kwargs.get("maxdepth"))
                super().get(rpath, lpath, recursive=recursive, **kwargs)
        finally:
            skipped, self._skipped = self._skipped or {}, None
            for name, why in skipped.items():
                log.warning("get: skipped skill %r: %s", name, why)

    def _unwritable(self, skill: str, paths: Any) -> bool:
        """Whether `skill` holds a path no file system may hold (noted for `get`'s warning)."""
        why = unwritable(paths)
        if why is None:
            return False
        if self._skipped is None:  # get_file on its own
            log.warning("get: skipped skill %r: %s", skill, why)
        else:
            self._skipped[skill] = why
        return True

    def cp_file(self, path1: str, path2: str, **kwargs: Any) -> None:
        path1, path2 = self._strip_protocol(path1), self._strip_protocol(path2)
        to_base = self._split(path2) is None
        if self._split(path1) is None:
            if to_base:
                self.base.cp_file(path1, path2, **kwargs)
            elif self.base.isfile(path1):
                mode = self.base.info(path1).get("mode")
                perm = mode & 0o777 if isinstance(mode, int) else None
                self._skills.write(path2, self.base.cat_file(path1), perm=perm)
            elif not self.base.isdir(path1):
                raise FileNotFoundError(path1)
            return
        _, item = self._skills.resolve(path1)
        if item is None:  # a directory: implied in the store, made in base
            if to_base:
                self.base.makedirs(path2, exist_ok=True)
        elif to_base:
            self.base.pipe_file(path2, self._skills.data(item))
        else:
            self._skills.write(path2, item, source=path1)

    def copy(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> None:
        with self._skills.batching():
            super().copy(path1, path2, recursive=recursive, **kwargs)

    def mv(self, path1: Any, path2: Any, recursive: bool = False, **kwargs: Any) -> None:
        """A move inside the store is one commit: a rename inside a skill is one publish, a
        skill directory moved to a new name is `store.edits.rename` (SKILL.md's `name`
        follows), a move into another skill one commit of both. A directory moves whole even
        without `recursive`, as on a local disk. Outside a transaction a move that meets
        another writer runs again on what is there now (docs/fsspec.md, "Moves")."""
        if all(isinstance(p, str) and _plain_base(self, p) for p in (path1, path2)):
            self.base.mv(
                self._strip_protocol(path1),
                self._strip_protocol(path2),
                recursive=recursive,
                **kwargs,
            )
            return
        if isinstance(path1, str) and not has_magic(path1) and self.isdir(path1):
            recursive = True
            src, dst = self._strip_protocol(path1).rstrip("/"), self._strip_protocol(path2)
            if dst.rstrip("/") == src or dst.startswith(src + "/"):  # it would copy, then rm
                raise OSError(  # the whole source, as local disks refuse (EINVAL)
                    errno.EINVAL, f"cannot move directory {path1!r} into itself ({path2!r})"
                )
            if self._renamed(src, dst.rstrip("/")):
                return
        if self._skills.staging:  # a transaction's: its edits are applied again on a conflict
            super().mv(path1, path2, recursive=recursive, **kwargs)
            return
        end = deadline(self.store.retry_for)
        for attempt in itertools.count():
            try:
                with self._skills.batching(together=True, replay=False):
                    super().mv(path1, path2, recursive=recursive, **kwargs)
                return
            except Conflict:
                if time.monotonic() > end:
                    raise
                self.invalidate_cache()
                pause(attempt)

    def _renamed(self, src: str, dst: str) -> bool:
        """Rename a skill when `src` is one of this scope's skill directories and `dst` a new
        skill directory, outside a transaction; False when the move is not a rename."""
        names, into = self._split(src), self._split(dst)
        if self._skills.staging or names is None or into is None or names[1] or into[1]:
            return False
        skill, new = names[0], into[0]
        found = self._skills.skill(skill)
        if found.scope != self.scope or not found.version or self.exists(dst):
            return False
        try:
            self.store.edits.rename(
                self.scope, skill, new, options=WriteOptions(message=self._skills.message)
            )
        except NotFound as exc:  # another writer moved or deleted it first
            raise FileNotFoundError(str(exc)) from None
        finally:
            self.invalidate_cache()
        return True

    def rm_file(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.rm_file(path)
        else:
            with self._skills.batching():
                self._skills.remove(path)

    def rm(self, path: Any, recursive: bool = False, maxdepth: int | None = None) -> None:
        """Store files are removed per skill in one publish each; directories are implied,
        so removing one removes nothing by itself."""
        base: list[str] = []
        with self._skills.batching():
            for p in self._strip_protocol([path] if isinstance(path, str) else list(path)):
                if _plain_base(self, p):
                    base.append(p)
                    continue
                found = self.expand_path(p, recursive=recursive, maxdepth=maxdepth)
                base += [q for q in found if q and self._split(q) is None]
                store = [q for q in found if self._split(q) is not None]
                for q in [q for q in store if self._skills.resolve(q)[1] is not None]:
                    self._skills.remove(q)
            if base:  # once the store's changes are in: a failed move keeps its source
                self._skills.after_commit(lambda: self.base.rm(tops(base), recursive, maxdepth))

    def mkdir(self, path: str, create_parents: bool = True, **kwargs: Any) -> None:
        """Store directories are implied by their files: nothing is made, but an existing
        path raises FileExistsError, as on a local disk."""
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.mkdir(path, create_parents=create_parents, **kwargs)
        else:
            self._skills.check_new_dir(path, exist_ok=False)

    def makedirs(self, path: str, exist_ok: bool = False) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.makedirs(path, exist_ok=exist_ok)
        else:
            self._skills.check_new_dir(path, exist_ok)

    def rmdir(self, path: str) -> None:
        path = self._strip_protocol(path)
        if self._split(path) is None:
            self.base.rmdir(path)


def _plain_base(fs: SkillFileSystem, path: str) -> bool:
    """A base path that no glob could stretch into skills/."""
    path = fs._strip_protocol(path)
    return bool(path) and not has_magic(path.split("/")[0]) and fs._split(path) is None

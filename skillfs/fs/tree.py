"""`skills/` of the fsspec filesystem: one agent's skills as files (docs/fsspec.md).

A tree with a user reads the user's skills over the agent-shared ones and writes the user's
scope; without one it reads and writes the agent-shared scope. Directories are implied by
files, as on object stores. Each thread may hold a batch: the snapshot a bulk call or a
transaction reads, and the edits it stages until the batch ends (skillfs.fs.staging).
Paths here are stripped of the protocol: `skills/<skill>/<path>`.
"""

from __future__ import annotations

import functools
import stat
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from skillfs.api import Store
from skillfs.errors import InvalidArgument, InvalidPath, PermissionDenied
from skillfs.fs.options import LazyStore
from skillfs.fs.staging import Batch, Delete, Edit, Item, StagedSkill, Write, publish
from skillfs.model import File, FileEntry, Scope
from skillfs.model.names import SIDE_DIRS, check_entry, is_hidden_dir, normalize_path, side_entry
from skillfs.store.blobs import sha256
from skillfs.store.limits import default_mode

Info = dict[str, Any]
SKILLS = "skills"
PREFETCH_BYTES = 64 * 1024 * 1024  # the most a bulk read holds in memory at once


@functools.lru_cache(maxsize=4096)
def split(path: str) -> tuple[str, str] | None:
    """(skill, path inside it) of a stripped store path, ("", "") for skills/ itself; None for
    a path outside skills/. Checked once per distinct path."""
    if path != SKILLS and not path.startswith(SKILLS + "/"):
        return None
    parts = path.split("/", 2)
    if len(parts) > 2 and parts[1] in SIDE_DIRS:  # a draft or archived skill is one entry
        first, _, rest = parts[2].partition("/")
        parts = [parts[0], f"{parts[1]}/{first}", *([rest] if rest else [])]
    try:
        skill = check_entry(parts[1]) if len(parts) > 1 else ""
        return skill, normalize_path(parts[2]) if len(parts) > 2 else ""
    except InvalidArgument as exc:
        raise InvalidPath(f"invalid path {path!r}: {exc}") from None


def target(path: str) -> tuple[str, str]:
    """The (skill, path) a store write goes to; InvalidPath when that is not a skill's file."""
    where = split(path)
    side = side_entry(where[0]) if where is not None else None
    if side is not None and where is not None and not where[1]:
        where = (side[0], side[1])  # a file directly under skills/_drafts/
    if where is None or not where[1]:
        raise InvalidPath(
            f"cannot write {path!r}: a file directly under skills/ is not allowed, every file "
            "belongs to a skill directory (skills/<skill>/SKILL.md)"
        )
    if is_hidden_dir(where[0]) and side_entry(where[0]) is None and "/" not in where[1]:
        raise InvalidPath(
            f"cannot write {path!r}: skills/{where[0]}/ is not a skill but holds skill "
            f"directories, as every directory whose name starts with '_' or '.' (docs/design.md "
            f"§1): write skills/{where[0]}/<skill>/SKILL.md"
        )
    return where


def dir_info(name: str, sk: StagedSkill | None = None) -> Info:
    """A directory's info; a directory under skills/ also has its version, its scope and
    whether it is a skill (`_drafts/`, `.archive/` are not: docs/design.md §1)."""
    info: Info = {"name": name, "size": 0, "type": "directory"}
    if name.split("/", 1)[-1] in SIDE_DIRS:
        info.update(skill=False)
    if sk is not None and sk.name not in SIDE_DIRS:  # (a side directory has neither)
        info.update(version=sk.version, scope=str(sk.scope), skill=not is_hidden_dir(sk.name))
    return info


class SkillTree:
    """The store half of a SkillFileSystem; `changed` is called after a commit that changed
    something (the filesystem drops its listings cache)."""

    def __init__(
        self,
        store: LazyStore,
        scope: Scope,
        shared: Scope,
        changed: Callable[[], Any],
        message: str = "",
    ) -> None:
        self._store = store
        self.scope = scope  # the scope written
        self.shared = shared  # the agent-shared scope, read under a user's own
        self._changed = changed
        self.message = message  # the commits' message when a transaction gives none
        self._local = threading.local()  # the batch in progress, per thread

    @property
    def store(self) -> Store:
        return self._store.get()

    # ------------------------------------------------------------------ batches

    @property
    def batch(self) -> Batch | None:
        """This thread's batch in progress, if any."""
        batch: Batch | None = getattr(self._local, "batch", None)
        return batch

    @property
    def staging(self) -> bool:
        """Whether this thread's changes are staged (a transaction, a bulk call): listings
        then show them, not the store's, so the filesystem's listings cache is left alone
        until they are committed (which clears it) or dropped."""
        return self.batch is not None

    def begin(self, together: bool, replay: bool = True) -> None:
        """Start this thread's batch (none may be in progress)."""
        assert self.batch is None
        self._local.batch = Batch(together, replay)

    def end(self, commit: bool, message: str | None = None) -> None:
        """End this thread's batch; publish its changes when `commit` (each skill once; all in
        one commit when the batch is `together`), else drop them."""
        batch = self.batch
        self._local.batch = None
        if not commit or batch is None:
            return
        touched = [sk for sk in batch.skills.values() if sk.edits]
        why = self.message if message is None else message
        for group in [touched] if batch.together else [[sk] for sk in touched]:
            publish(self.store, self.scope, group, batch, self.read, why)
        if touched:
            self._changed()
        for work in batch.after:
            work()

    def after_commit(self, work: Callable[[], None]) -> None:
        """Run `work` once this thread's batch is committed (at once when none is open): a
        move from the base filesystem into the store removes its source only then."""
        batch = self.batch
        if batch is None:
            work()
        else:
            batch.after.append(work)

    @contextmanager
    def batching(self, together: bool = False, replay: bool = True) -> Iterator[None]:
        """Stage store changes until the outermost batch ends, then commit them. Nothing is
        written if it raises."""
        if self.batch is not None:
            yield
            return
        self.begin(together, replay)
        try:
            yield
        except BaseException:
            self.end(commit=False)
            raise
        self.end(commit=True)

    # ------------------------------------------------------------------ reading

    def read(self, names: Sequence[str] | None) -> dict[str, StagedSkill]:
        """Every named skill (None: every existing one), the user's over the shared ones. One
        skill is the store's `resolve`; more are two listings, one per scope. A SQLite store
        that does not exist yet has none (and is not made by reading it)."""
        if self._store.missing():
            return {n: StagedSkill(n, None, 0, 0, {}) for n in names or ()}
        if names is not None and len(names) == 1:
            return {names[0]: self._read_one(names[0])}
        own = self.store.manifests(self.scope, names)
        out = {
            n: StagedSkill(n, self.scope, m.version, m.version, dict(m.files))
            for n, m in own.items()
        }
        if self.scope.kind == "user":
            rest = None if names is None else [n for n in names if n not in own]
            if rest is None or rest:
                for n, m in self.store.manifests(self.shared, rest).items():
                    out.setdefault(n, StagedSkill(n, self.shared, m.version, 0, dict(m.files)))
        for n in names or ():
            out.setdefault(n, StagedSkill(n, None, 0, 0, {}))
        return out

    def _read_one(self, name: str) -> StagedSkill:
        found = self.store.resolve(self.scope, name)
        if found is None:
            return StagedSkill(name, None, 0, 0, {})
        scope, m = found
        expected = m.version if scope == self.scope else 0
        return StagedSkill(name, scope, m.version, expected, dict(m.files))

    def skills(self, names: Sequence[str] | None = None) -> dict[str, StagedSkill]:
        """Like `read`, but inside a batch from (and into) its snapshot."""
        batch = self.batch
        if batch is None:
            return self.read(names)
        if names is None and not batch.complete:
            for n, sk in self.read(None).items():
                if n not in batch.skills or not batch.skills[n].edits:
                    batch.skills[n] = sk
            batch.complete = True
        if names is None:
            return batch.skills
        missing = [n for n in names if n not in batch.skills]
        if missing and batch.complete:
            batch.skills.update({n: StagedSkill(n, None, 0, 0, {}) for n in missing})
        elif missing:
            batch.skills.update(self.read(missing))
        return {n: batch.skills[n] for n in names}

    def skill(self, name: str) -> StagedSkill:
        return self.skills([name])[name]

    def located(self, skill: str, rel: str) -> tuple[StagedSkill, str]:
        """The skill (or entry) holding `rel`, and the path in it: an entry that does not
        exist may be a directory of the legacy single `_drafts` manifest, read as before."""
        sk = self.skill(skill)
        side = side_entry(skill)
        if sk.files or side is None:
            return sk, rel
        legacy, inner = self.skill(side[0]), f"{side[1]}/{rel}" if rel else side[1]
        if any(p == inner or p.startswith(inner + "/") for p in legacy.files):
            return legacy, inner
        return sk, rel

    def side(self, where: str) -> list[StagedSkill]:
        """The entries under `_drafts/` or `.archive/` that hold files, and the legacy single
        manifest of that name an older skillfs wrote (read as before: docs/governance.md)."""
        return [
            sk
            for n, sk in self.skills().items()
            if sk.files and (n == where or n.startswith(where + "/"))
        ]

    def resolve(self, path: str) -> tuple[StagedSkill | None, Item | None]:
        """(skill, file) at a store path, file None for a directory, skill None for skills/.
        NoStore (a FileNotFoundError) when the store's SQLite file does not exist."""
        self._store.check()
        skill, rel = split(path) or ("", "")
        if not skill:
            return None, None
        if skill in SIDE_DIRS and not rel and self.side(skill):
            return self.skill(skill), None  # skills/_drafts/ while it holds an entry
        sk, rel = self.located(skill, rel)
        item = sk.files.get(rel) if rel else None
        if item is None and not any(not rel or p.startswith(rel + "/") for p in sk.files):
            raise FileNotFoundError(path)
        return sk, item

    def check_new_dir(self, path: str, exist_ok: bool) -> None:
        """FileExistsError for a file's path, and for a directory's unless `exist_ok`, as
        os.makedirs; NotADirectoryError below a file; nothing else to do, since store
        directories are implied."""
        try:
            _, item = self.resolve(path)
        except FileNotFoundError:
            self._no_file_above(path)
            return
        if item is not None or not exist_ok:
            kind = "directory" if item is None else "file"
            raise FileExistsError(f"cannot make directory {path}: a {kind} is there")

    def _no_file_above(self, path: str) -> None:
        """NotADirectoryError where a file holds the place of a directory above `path`
        (inside a skill: `skills/<skill>/...`), as a local disk has it."""
        parent = path.rpartition("/")[0]
        while parent.count("/") >= 2:
            try:
                _, item = self.resolve(parent)
            except FileNotFoundError:
                parent = parent.rpartition("/")[0]
                continue
            if item is not None:
                raise NotADirectoryError(f"cannot make directory {path}: {parent} is a file")
            return

    def data(self, item: Item, start: int | None = None, end: int | None = None) -> bytes:
        """A file's bytes or the range [start, end) (negative counts from the end), reading
        only the chunks the range covers."""
        size = item.size if isinstance(item, FileEntry) else len(item.data)
        lo = 0 if start is None else max(0, size + start) if start < 0 else min(start, size)
        hi = size if end is None else max(0, size + end) if end < 0 else min(end, size)
        if isinstance(item, File):
            return item.data[lo:hi]
        batch = self.batch
        cached = batch.blobs.get(item.sha256) if batch else None
        if cached is not None:
            return cached[lo:hi]
        return self.store.read_entry(item, lo, hi)  # b"" for an empty range

    def prefetch(self, paths: Sequence[str]) -> None:
        """Fetch the stored files at `paths` into the batch in one batched round trip."""
        batch = self.batch
        assert batch is not None
        wanted: list[FileEntry] = []
        budget = PREFETCH_BYTES
        for path in paths:
            try:
                _, item = self.resolve(path)
            except FileNotFoundError:
                continue  # the bulk call reports it as its on_error says
            if isinstance(item, FileEntry) and item.size <= budget:
                wanted.append(item)
                budget -= item.size
        batch.blobs.update(self.store.read_entries(wanted))

    # ------------------------------------------------------------------ writing

    def write(
        self,
        path: str,
        content: bytes | Item,
        *,
        exclusive: bool = False,
        perm: int | None = None,
        source: str | None = None,
    ) -> None:
        """Stage (or, outside a batch, publish) one file. New content without a known mode
        keeps the mode of the file it replaces, else gets the store's default. `source`: the
        store path a copied file was read from (read again if the commit meets a conflict)."""
        skill, rel = target(path)
        with self.batching():
            sk = self.skill(skill)
            sk.check_write(rel, exclusive)
            now = time.time()
            if isinstance(content, bytes):
                old = sk.files.get(rel)
                mode = perm if perm is not None else old.mode if old else None
                item: Item = File(
                    content, default_mode(rel, content) if mode is None else mode, now
                )
            else:
                item = content.model_copy(update={"mtime": now})
            self._apply(sk, Write(rel, item, exclusive, target(source) if source else None))

    def remove(self, path: str) -> None:
        """Stage the removal of a store file (inside a batch)."""
        sk, item = self.resolve(path)
        if sk is None or item is None:
            raise IsADirectoryError(path)
        if sk.scope != self.scope and not sk.written:
            raise PermissionDenied(
                f"{path} is in {self.shared}, which this filesystem for {self.scope} can read "
                "but not change: remove it with a filesystem without user_id, or write to the "
                "skill first to make the user's own copy"
            )
        self._apply(sk, Delete(target(path)[1]))

    def _apply(self, sk: StagedSkill, edit: Edit) -> None:
        sk.apply(edit)
        batch = self.batch
        assert batch is not None  # every edit is staged
        batch.log.append((sk.name, edit))

    # ------------------------------------------------------------------ listing

    def file_info(self, name: str, sk: StagedSkill, item: Item) -> Info:
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

    def listing(self, path: str, maxdepth: int | None, withdirs: bool) -> dict[str, Info]:
        """Store files below `path` (and with `withdirs` the directories they imply)."""
        skill, rel = split(path) or ("", "")
        out: dict[str, Info] = {}
        if skill in SIDE_DIRS and not rel:  # skills/_drafts: its entries
            group = self.side(skill)
        elif skill:
            sk, rel = self.located(skill, rel)
            group = [sk]
        else:
            group = list(self.skills().values())
        for sk in group:
            root = f"{SKILLS}/{sk.name}"
            if sk.files and not skill and withdirs:
                top = f"{SKILLS}/{sk.name.split('/', 1)[0]}"  # skills/_drafts for its entries
                out[top] = dir_info(top, sk if top == root else None)
            for p, item in sk.files.items():
                if rel and not p.startswith(rel + "/"):
                    continue
                name = f"{root}/{p}"
                parts = name[len(path) + 1 :].split("/")
                if maxdepth is None or len(parts) <= maxdepth:
                    out[name] = self.file_info(name, sk, item)
                depth = len(parts) if maxdepth is None else min(len(parts), maxdepth + 1)
                for i in range(1, depth if withdirs else 1):
                    parent = f"{path}/{'/'.join(parts[:i])}"
                    out.setdefault(parent, dir_info(parent))
        return out

"""`upath.UPath("skillfs://skills/x", ...)` support, found through the
`universal_pathlib.implementations` entry point, so universal-pathlib knows the protocol is
implemented rather than warning that it falls back to an untested default."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from fsspec import register_implementation
from upath._flavour import WrappedFileSystemFlavour
from upath.implementations.cloud import CloudPath

from skillfs.fs.filesystem import SkillFileSystem
from skillfs.fs.options import with_defaults

# universal-pathlib derives a path flavour (root marker, protocol stripping) from the fsspec
# class when it is registered, and guesses one (with a warning) when it is not yet imported.
register_implementation(SkillFileSystem.protocol, SkillFileSystem)
# The first segment is the path's anchor, as a bucket is on s3:// (docs/fsspec.md "UPath").
# universal-pathlib 0.3.10 has no public hook for it: the dev extra pins that exact version.
WrappedFileSystemFlavour.protocol_config["netloc_is_anchor"].add(SkillFileSystem.protocol)
WrappedFileSystemFlavour.from_protocol.cache_clear()


class SkillPath(CloudPath):
    """A path on a `skillfs://` filesystem; all behaviour comes from SkillFileSystem."""

    __slots__ = ()

    @classmethod
    def _transform_init_args(
        cls, args: tuple[Any, ...], protocol: str, storage_options: dict[str, Any]
    ) -> tuple[tuple[Any, ...], str, dict[str, Any]]:
        """The filesystem's $SKILLFS_* defaults, so `storage_options` is what it was made with."""
        args, protocol, options = super()._transform_init_args(args, protocol, storage_options)
        return args, protocol, with_defaults(options)

    def iterdir(self) -> Iterator[SkillPath]:
        """As UPath's, but a store that does not exist is said (NoStore, a FileNotFoundError)
        rather than taken for a missing directory (NotADirectoryError)."""
        self.fs.check_store(self.path)
        return super().iterdir()

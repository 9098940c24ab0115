"""`upath.UPath("skillfs://skills/x", ...)` support, found through the
`universal_pathlib.implementations` entry point, so universal-pathlib knows the protocol is
implemented rather than warning that it falls back to an untested default."""

from __future__ import annotations

from fsspec import register_implementation
from upath import UPath

from skillfs.fs.filesystem import SkillFileSystem

# universal-pathlib derives a path flavour (root marker, protocol stripping) from the fsspec
# class when it is registered, and guesses one (with a warning) when it is not yet imported.
register_implementation(SkillFileSystem.protocol, SkillFileSystem)


class SkillPath(UPath):
    """A path on a `skillfs://` filesystem; all behaviour comes from SkillFileSystem."""

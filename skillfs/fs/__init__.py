"""`skillfs://`: the fsspec filesystem (docs/fsspec.md), registered through the `fsspec.specs`
entry point as `skillfs.fs:SkillFileSystem`."""

from skillfs.fs.filesystem import SkillFileSystem

__all__ = ["SkillFileSystem"]

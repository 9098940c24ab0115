"""The `skillfs` command (docs/cli.md)."""

from skillfs.cli.app import app, main

__all__ = ["app", "main"]

"""SQLite: the embedded default (docs/engine-sqlite.md)."""

"""The engine a store URL names (docs/design.md §2); each is imported only when its URL is
opened, so a worker on Redis never imports etcd's client."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from skillfs.engines.base import Engine
from skillfs.errors import InvalidArgument

DEFAULT_PATH = Path.home() / ".local" / "share" / "skillfs" / "skills.db"


def default_url() -> str:
    """`$SKILLFS_STORE`, else the embedded SQLite file."""
    return os.environ.get("SKILLFS_STORE") or f"sqlite:///{DEFAULT_PATH}"


def file_to_create(url: str) -> Path | None:
    """The file opening `url` would create: a sqlite: URL's file that does not exist yet. None
    for an existing file and for every other store, so a reader can refuse a mistyped path."""
    if urlsplit(url).scheme != "sqlite":
        return None
    from skillfs.engines.sqlite.engine import parse_path

    path = parse_path(url)
    return None if path.exists() else path


def open_engine(url: str | None = None, **options: Any) -> Engine:
    url = url or default_url()
    scheme = urlsplit(url).scheme
    if scheme == "memory":
        from skillfs.engines.memory import shared_memory_engine

        return shared_memory_engine(url)
    if scheme == "sqlite":
        from skillfs.engines.sqlite.engine import SqliteEngine

        return SqliteEngine(url, **options)
    if scheme.partition("+")[0] in ("redis", "rediss"):
        from skillfs.engines.redis.engine import RedisEngine

        return RedisEngine(url, **options)
    if scheme == "etcd":
        from skillfs.engines.etcd.engine import EtcdEngine

        return EtcdEngine(url, **options)
    if scheme in ("postgresql", "postgres"):
        try:
            from skillfs.engines.postgres.engine import PostgresEngine
        except ImportError as exc:
            raise InvalidArgument(
                f"a {scheme}:// store needs psycopg ({exc}): pip install 'skillfs[postgres]'"
            ) from None
        return PostgresEngine(url, **options)
    if scheme in ("grpc", "grpcs"):
        from skillfs.remote.engine import GrpcEngine

        return GrpcEngine(url, **options)
    raise InvalidArgument(
        f"unknown store URL {url!r}: use memory://, sqlite:///path, redis://host:port/db, "
        "rediss://, redis+cluster://h:p,h:p, redis+sentinel://h:p/service/db, "
        "etcd://host:port[,host:port], postgresql://user:password@host:port/db or "
        "grpc://host:port[,host:port] (grpcs:// for TLS)"
    )

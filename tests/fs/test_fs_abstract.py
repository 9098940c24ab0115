"""fsspec's own abstract test suite (copy, get, put, pipe, open) on `skillfs://`, with every
test's root a fresh skill under skills/, against the memory engine, etcd (the most constrained
engine) and grpc:// (a skillfs server, as workers mount it).

Store directories are implied by their files, as on object stores, so the suite runs with
`supports_empty_directories` False (as s3fs and gcsfs do); no test is skipped or xfailed.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path

import fsspec.tests.abstract as abstract
import pytest

from skillfs.fs import SkillFileSystem
from support.grpc_servers import ADMIN
from tests.stores import url_for

ENGINES = ["memory", "etcd", "grpc"]


@pytest.fixture(scope="module", params=ENGINES)
def engine_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    return url_for(request, request.param, tmp_path_factory.mktemp("store"))


class SkillfsFixtures(abstract.AbstractFixtures):  # type: ignore[misc]
    @pytest.fixture(scope="class")
    @classmethod
    def fs(cls, engine_url: str, tmp_path_factory: pytest.TempPathFactory) -> SkillFileSystem:
        # a user-scoped filesystem: reads go through the user-over-shared merge
        return SkillFileSystem(
            store=engine_url,
            agent_id="abstract",
            user_id="u",
            base=str(tmp_path_factory.mktemp("base")),
            token=ADMIN if engine_url.startswith("grpc") else None,
            skip_instance_cache=True,
        )

    @pytest.fixture
    def fs_path(self) -> str:
        return f"skills/t{uuid.uuid4().hex[:10]}"

    @pytest.fixture
    def fs_join(self) -> Callable[..., str]:
        return lambda *parts: "/".join(parts)

    @pytest.fixture
    def local_path(self, tmp_path: Path) -> str:
        return str(tmp_path)

    @pytest.fixture
    def supports_empty_directories(self) -> bool:
        return False


class TestCopy(abstract.AbstractCopyTests, SkillfsFixtures):  # type: ignore[misc]
    pass


class TestGet(abstract.AbstractGetTests, SkillfsFixtures):  # type: ignore[misc]
    pass


class TestPut(abstract.AbstractPutTests, SkillfsFixtures):  # type: ignore[misc]
    pass


class TestPipe(abstract.AbstractPipeTests, SkillfsFixtures):  # type: ignore[misc]
    pass


class TestOpen(abstract.AbstractOpenTests, SkillfsFixtures):  # type: ignore[misc]
    pass

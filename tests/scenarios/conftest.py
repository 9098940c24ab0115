"""tests/scenarios: every test is marked `slow` (tests/conftest.py); the `store` fixture runs on
one topology of each engine (tests/stores.py's ENGINE_KINDS), not on every topology."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stores import ENGINE_KINDS, url_for


@pytest.fixture(params=ENGINE_KINDS)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh namespace on memory, SQLite, Redis, etcd and grpc://."""
    return url_for(request, request.param, tmp_path)

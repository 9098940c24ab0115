"""tests/engines: the `store` fixture on every engine and topology (tests/stores.py's ENGINES)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.stores import ENGINES, url_for


@pytest.fixture(params=ENGINES)
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh namespace on every engine and topology."""
    return url_for(request, request.param, tmp_path)

"""Fixtures of the reliability tests (the shared ones are in `tests/conftest.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from ..support.catalog_lock import CatalogLock


@pytest.fixture
def catalog_lock(lake_dir: Path) -> Iterator[CatalogLock]:
    """Holds the lake's catalog lock from another process when the test calls `hold()`;
    released at the end of the test."""
    lock = CatalogLock(lake_dir)
    yield lock
    lock.release()

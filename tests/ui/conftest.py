"""Fixtures of the review app's tests (the shared ones are in `tests/conftest.py`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from ..support.lake import copy_lake
from ..support.report_lake import EvaluatedLake


@pytest.fixture(scope="module")
def review_lake(evaluated_lake: EvaluatedLake, tmp_path_factory: pytest.TempPathFactory) -> Any:
    """A copy of the evaluated lake (two runs of the example suite, a planted hostile
    conversation) that this module's tests may label."""
    target = copy_lake(evaluated_lake.lake, tmp_path_factory.mktemp("review") / "lake")
    return EvaluatedLake(target, evaluated_lake.baseline_run, evaluated_lake.run)


@pytest.fixture(scope="module")
def client(review_lake: EvaluatedLake) -> Iterator[Any]:
    """The app in-process (no server), as a browser on its own origin talks to it."""
    from starlette.testclient import TestClient

    from spanscore.ui import create_app

    app = create_app(str(review_lake.lake), reviewer="ann")
    with TestClient(app, base_url="http://127.0.0.1:8765") as c:
        c.headers["origin"] = "http://127.0.0.1:8765"
        yield c

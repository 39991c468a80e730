"""spanscore evaluation: score conversations stored in the lake.

Usage::

    from spanscore.evaluation import load_trajectory, open_lake
    con = open_lake("./lake")   # DuckDB connection, lake attached as `lake`, views defined
    trajectory = load_trajectory(con, "conv-123")
    for turn in trajectory.turns:
        print(turn.user_message, [call.name for call in turn.tool_calls])

    suite = load_suite("suite.yaml")     # scenarios, policies, metrics (SuiteError if invalid)
    for row in suite.score(trajectory):  # one ScoreRow per (scenario, metric)
        print(row.scenario_id, row.metric, row.score.value, row.score.passed)

Extending it (docs/plugins.md): `@assertion` registers an assertion type (an `AssertionBase`
model with its `evaluate`), `@metric` a metric function; an installed package registers its
own through the entry-point group `spanscore`, and suites name them `package/name`.

Environment:
    SPANSCORE_LAKE   the default lake of the `spanscore` commands
"""

from __future__ import annotations

import os

import duckdb

from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import (
    REGISTRY,
    EvalContext,
    MetricRegistry,
    PluginError,
    ToolSpec,
    metric,
)
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.suites.load import SuiteError, load_suite, suite_json_schema
from spanscore.evaluation.suites.loaded import LoadedSuite, ScoreRow
from spanscore.evaluation.suites.model import Suite
from spanscore.evaluation.trajectory.load import load_trajectories, load_trajectory
from spanscore.evaluation.trajectory.model import Handoff, ModelCall, ToolCall, Trajectory, Turn
from spanscore.lake import connect


def open_lake(
    lake: str | os.PathLike[str] | None = None, *, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake attached and selected (default: $SPANSCORE_LAKE)."""
    spec = lake if lake is not None else os.environ.get("SPANSCORE_LAKE", "")
    return connect(spec, read_only=read_only)


__all__ = [
    "REGISTRY",
    "AssertionBase",
    "EvalContext",
    "Handoff",
    "LoadedSuite",
    "MetricRegistry",
    "ModelCall",
    "PluginError",
    "Score",
    "ScoreRow",
    "Suite",
    "SuiteError",
    "ToolCall",
    "ToolSpec",
    "Trajectory",
    "Turn",
    "assertion",
    "load_suite",
    "load_trajectories",
    "load_trajectory",
    "metric",
    "open_lake",
    "suite_json_schema",
]

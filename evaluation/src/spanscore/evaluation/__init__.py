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

import importlib
import os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from spanscore.evaluation.trajectory.model import (
        Handoff,
        ModelCall,
        ToolCall,
        Trajectory,
        Turn,
    )

# Where each name of the package is defined. A name is imported when first used, so that
# `spanscore show` (trajectories) does not import the suites, their metrics and the judge.
_DEFINED_IN = {
    "AssertionBase": "scoring.assertion",
    "assertion": "scoring.plugins",
    "REGISTRY": "scoring.registry",
    "EvalContext": "scoring.registry",
    "MetricRegistry": "scoring.registry",
    "PluginError": "scoring.registry",
    "ToolSpec": "scoring.registry",
    "metric": "scoring.registry",
    "Score": "scoring.score",
    "SuiteError": "suites.load",
    "load_suite": "suites.load",
    "suite_json_schema": "suites.load",
    "LoadedSuite": "suites.loaded",
    "ScoreRow": "suites.loaded",
    "Suite": "suites.model",
    "load_trajectories": "trajectory.load",
    "load_trajectory": "trajectory.load",
    "Handoff": "trajectory.model",
    "ModelCall": "trajectory.model",
    "ToolCall": "trajectory.model",
    "Trajectory": "trajectory.model",
    "Turn": "trajectory.model",
}


def __getattr__(name: str) -> Any:
    module = _DEFINED_IN.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_DEFINED_IN])


def open_lake(
    lake: str | os.PathLike[str] | None = None, *, read_only: bool = False
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the lake attached and selected (default: $SPANSCORE_LAKE)."""
    from spanscore.lake import connect

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

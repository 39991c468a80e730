"""Runs for people: each suite's runs over time, one run's overview, two runs compared. The
same documents the report and `spanscore compare` are made of."""

from __future__ import annotations

import dataclasses
from typing import Any

import duckdb

from spanscore.evaluation.report.data import (
    ReportError,
    ReportOptions,
    resolve_run,
    run_header,
    run_overview,
)
from spanscore.evaluation.runs import store
from spanscore.evaluation.runs.compare import compare_runs
from spanscore.lake import ALIAS


def run_history(
    con: duckdb.DuckDBPyConnection, *, suite: str | None = None, limit: int = 60
) -> list[dict[str, Any]]:
    """Per suite (newest run first), its last `limit` runs: status, why, gates, and the pass
    rate and mean of each scenario's metrics, oldest first so that they plot as a trend."""
    rows = store.runs(con, suite=suite)
    by_suite: dict[str, list[store.RunRow]] = {}
    for row in rows:
        kept = by_suite.setdefault(row.suite_name, [])
        if len(kept) < limit:
            kept.append(row)
    ids = [r.run_id for runs in by_suite.values() for r in runs]
    figures: dict[str, list[dict[str, Any]]] = {}
    if ids:
        for run_id, scenario, metric, n, mean, pass_rate, errors in con.execute(
            f"""SELECT run_id, scenario_id, metric, count(*), avg(value)
                    FILTER (WHERE isfinite(value)),
                       avg(passed::INTEGER), count(error)
                FROM {ALIAS}.scores WHERE list_contains(?, run_id)
                GROUP BY ALL ORDER BY run_id, scenario_id NULLS FIRST, metric""",
            [ids],
        ).fetchall():
            figures.setdefault(run_id, []).append(
                {
                    "scenario_id": scenario,
                    "metric": metric,
                    "scores": n,
                    "mean": mean,
                    "pass_rate": pass_rate,
                    "errors": errors,
                }
            )
    history = []
    for suite_name, runs in by_suite.items():
        history.append(
            {
                "suite_name": suite_name,
                "runs": [
                    {**run_header(con, r.run_id), "metrics": figures.get(r.run_id, [])}
                    for r in reversed(runs)
                ],
            }
        )
    return history


def run_view(con: duckdb.DuckDBPyConnection, run: str) -> dict[str, Any]:
    """A run's overview: header, gates and why its status, baseline comparison, summary per
    scenario and metric, trend over the suite's runs, and pass^k for a simulation."""
    overview = run_overview(con, run, ReportOptions())
    document = dataclasses.asdict(overview)
    document.pop("scores")
    document.pop("declared")
    return document


def compare_view(con: duckdb.DuckDBPyConnection, run_a: str, run_b: str) -> dict[str, Any]:
    """`spanscore compare A B`: each metric's change with its 95 % bootstrap interval, and the
    conversations that regressed, were fixed or changed."""
    a, b = resolve_run(con, run_a), resolve_run(con, run_b)
    if a == b:
        raise ReportError(f"{run_a!r} and {run_b!r} are the same run: compare two runs")
    result = compare_runs(con, a, b)
    return {
        "run_a": run_header(con, a),
        "run_b": run_header(con, b),
        "regressed": result.regressed,
        "notes": result.notes,
        "metrics": [
            {**dataclasses.asdict(m), "significant": m.significant, "changed": m.changed}
            for m in result.metrics
        ],
        "conversations": [{**dataclasses.asdict(c), "kind": c.kind} for c in result.conversations],
    }

"""Trials of a simulation in an evaluation run: per scenario, how many trials counted, how many
passed, and pass^k for every k up to the trials (read from the lake's `scenario_pass_k` view,
where pass^k is defined); averaged over scenarios as tau-bench reports it; and the gates on
it (`--fail-under pass^3=0.8`)."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from spanscore.evaluation.runs.result import GateResult, ScenarioTrials, mean_pass_hat_k
from spanscore.evaluation.suites.model import Gate


def trial_results(con: duckdb.DuckDBPyConnection, run_id: str) -> list[ScenarioTrials]:
    rows = con.execute(
        "SELECT scenario_id, trials, passed, k, pass_hat_k FROM scenario_pass_k "
        "WHERE run_id = ? ORDER BY scenario_id, k",
        [run_id],
    ).fetchall()
    results: dict[str, ScenarioTrials] = {}
    for scenario_id, trials, passed, k, value in rows:
        entry = results.setdefault(
            str(scenario_id), ScenarioTrials(str(scenario_id), int(trials), int(passed))
        )
        entry.pass_hat_k[int(k)] = float(value)
    return list(results.values())


def check_trial_gate(gate: Gate, results: Sequence[ScenarioTrials]) -> GateResult:
    """A pass^k gate: the mean pass^k (of the gate's scenario, or over scenarios) against
    `min_pass_rate`. No trials measured fails, unless the gate allows it."""
    assert gate.pass_k is not None
    measured = mean_pass_hat_k(results, gate.pass_k, gate.scenario)
    if measured is None:
        return GateResult(gate, None, gate.allow_empty)
    target = gate.min_pass_rate if gate.min_pass_rate is not None else 0.0
    return GateResult(gate, measured, measured >= target)

"""The report's trials grid: for a run that scored a simulation, each scenario's trials (passed,
failed, and why each ended) and its pass^k, read from the lake's `simulation_trials` and
`scenario_pass_k` views (where a trial's verdict and pass^k are defined); and the scores about
the simulated users (`simulator.*`), which the report shows apart from the agent's."""

from __future__ import annotations

import duckdb

from spanscore.evaluation.report.schema import (
    NotCountedDoc,
    ScenarioTrialsDoc,
    TrialCellDoc,
    TrialsDoc,
)
from spanscore.evaluation.runs.result import mean_pass_hat_k
from spanscore.evaluation.runs.trials import trial_results
from spanscore.lake.schema import SIMULATOR_METRIC_PREFIX


def trials_doc(
    con: duckdb.DuckDBPyConnection, run_id: str, simulation_id: str | None
) -> TrialsDoc | None:
    """The grid of a simulation's run; None for a run over production traffic."""
    if simulation_id is None:
        return None
    results = trial_results(con, run_id)
    cells: dict[str, list[TrialCellDoc]] = {}
    for scenario, trial, conversation_id, passed, stop_reason in con.execute(
        "SELECT scenario_id, trial, conversation_id, passed, stop_reason FROM simulation_trials "
        "WHERE run_id = ? ORDER BY scenario_id, trial",
        [run_id],
    ).fetchall():
        cells.setdefault(str(scenario), []).append(
            {
                "trial": int(trial),
                "conversation_id": str(conversation_id),
                "passed": bool(passed),
                "stop_reason": str(stop_reason),
            }
        )
    # The trials that did not count, shown too (else a spent budget looks like fewer trials):
    # each one's latest attempt, when no attempt of it counted.
    counted = {(s, c["trial"]) for s, listed in cells.items() for c in listed}
    not_counted: dict[str, list[NotCountedDoc]] = {}
    for scenario, trial, conversation_id, reason in con.execute(
        "SELECT scenario_id, trial, arg_max(conversation_id, attempt), "
        "arg_max(CASE WHEN status = 'finished' THEN stop_reason ELSE 'not_run' END, attempt) "
        "FROM simulated_conversations WHERE simulation_id = ? GROUP BY ALL "
        "ORDER BY scenario_id, trial",
        [simulation_id],
    ).fetchall():
        if (str(scenario), int(trial)) not in counted:
            not_counted.setdefault(str(scenario), []).append(
                {
                    "trial": int(trial),
                    "conversation_id": str(conversation_id),
                    "stop_reason": str(reason or "not_run"),
                }
            )
    most = max((r.trials for r in results), default=0)
    rows: dict[str, ScenarioTrialsDoc] = {
        r.scenario_id: {
            "scenario": r.scenario_id,
            "trials": r.trials,
            "passed": r.passed,
            "pass_hat_k": {str(k): v for k, v in r.pass_hat_k.items()},
            "cells": cells.get(r.scenario_id, []),
            "not_counted": not_counted.get(r.scenario_id, []),
        }
        for r in results
    }
    for scenario, listed in not_counted.items():  # no trial of it counted
        if scenario not in rows:
            rows[scenario] = {
                "scenario": scenario,
                "trials": 0,
                "passed": 0,
                "pass_hat_k": {},
                "cells": [],
                "not_counted": listed,
            }
    return {
        "simulation_id": simulation_id,
        "scenarios": [rows[name] for name in sorted(rows)],
        "mean_pass_hat_k": {str(k): mean_pass_hat_k(results, k) for k in range(1, most + 1)},
    }


def about_the_simulator(metric: str) -> bool:
    """Whether a score judges the simulated user rather than the agent."""
    return metric.startswith(SIMULATOR_METRIC_PREFIX)

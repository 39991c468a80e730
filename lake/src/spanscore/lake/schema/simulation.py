"""The simulation views: which trials of a simulation passed in an evaluation run, and the
pass^k of each scenario over its trials. pass^k is defined here only; the run summary, the
report and the gates read it from `scenario_pass_k`."""

from __future__ import annotations

# Why a simulated conversation ended. The first five end a trial that counts in pass^k (the
# last two as a failure of the agent); the others leave the trial out.
SIMULATION_STOP_REASONS = (
    "goal_reached",  # the simulated user said its goal was reached
    "user_gave_up",  # the simulated user stopped without reaching it
    "max_turns",  # the user's turns ran out
    "agent_error",  # the agent raised, or answered what cannot be read as a reply
    "timeout",  # the agent did not answer one turn in time
    "user_model_error",  # the user model failed after its retries: incomplete
    "budget",  # the user model's budget was spent before the trial ran: not run
    "interrupted",  # the simulation was stopped mid-trial; `simulate --resume` runs it again
)
AGENT_FAILURES = ("agent_error", "timeout")
COUNTED_STOP_REASONS = SIMULATION_STOP_REASONS[:5]
# The simulated user took the conversation to an end (the agent answered every turn): a
# simulation with none of these measured nothing, and never passes.
COMPLETED_STOP_REASONS = SIMULATION_STOP_REASONS[:3]

# Scores about the simulated user rather than the agent (`simulator.fidelity`): shown apart,
# and never part of whether the agent passed a trial.
SIMULATOR_METRIC_PREFIX = "simulator."


def _listed(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{v}'" for v in values)


# One row per (evaluation run, trial that counts): the trial passed when the agent neither
# failed nor timed out and every score of the run on its conversation passed (a trial with
# no score measured nothing: not passed).
SIMULATION_TRIALS = f"""
    SELECT *, stop_reason NOT IN ({_listed(AGENT_FAILURES)})
              AND score_count > 0 AND failed_scores = 0 AS passed
    FROM (
        SELECT r.run_id, c.simulation_id, c.scenario_id, c.trial, c.conversation_id,
               c.stop_reason, count(s.metric) AS score_count,
               count(s.metric) FILTER (WHERE NOT coalesce(s.passed, false)) AS failed_scores
        FROM eval_runs r
        JOIN simulated_conversations c ON c.simulation_id = r.simulation_id
        LEFT JOIN scores s ON s.run_id = r.run_id AND s.conversation_id = c.conversation_id
            AND NOT starts_with(s.metric, '{SIMULATOR_METRIC_PREFIX}')
        WHERE c.status = 'finished' AND c.stop_reason IN ({_listed(COUNTED_STOP_REASONS)})
        GROUP BY ALL
    )
"""

# pass^k as tau-bench defines it: for a scenario with n counted trials of which c passed,
# C(c, k) / C(n, k), the chance that k trials drawn without replacement all pass; for every k
# from 1 to n. Computed as the product of (c - i) / (n - i) for i < k, which is exact in floats
# for the small n of trials (no factorials).
SCENARIO_PASS_K = """
    WITH counted AS (
        SELECT run_id, simulation_id, scenario_id, count(*) AS trials,
               count(*) FILTER (WHERE passed) AS passed
        FROM simulation_trials GROUP BY ALL
    )
    SELECT run_id, simulation_id, scenario_id, trials, passed, k,
           CASE WHEN passed < k THEN 0.0
                ELSE (SELECT product((passed - i)::DOUBLE / (trials - i)) FROM range(0, k) t(i))
           END AS pass_hat_k
    FROM counted, range(1, trials + 1) ks(k)
"""

SIMULATION_VIEWS = {
    "simulation_trials": SIMULATION_TRIALS,
    "scenario_pass_k": SCENARIO_PASS_K,
}

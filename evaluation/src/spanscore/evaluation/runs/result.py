"""What a run gives back: its counts, its summary per scenario and metric, its gates, and
whether it passed (`RunResult`, also as the JSON of `spanscore evaluate --format json`)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from spanscore.evaluation.suites.model import Gate


def plural(n: int, noun: str) -> str:
    """`1 conversation`, `2 conversations`: the count and its noun, as the messages say it."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


@dataclass
class SummaryRow:
    scenario_id: str | None
    metric: str
    conversations: int
    judged: int  # scores with a pass/fail
    pass_rate: float | None
    mean: float | None
    errors: int
    worst: list[str]
    first_error: str | None = None


@dataclass
class ScenarioTrials:
    scenario_id: str
    trials: int  # trials that count (ran to an end; see the lake's stop reasons)
    passed: int
    pass_hat_k: dict[int, float] = field(default_factory=dict)


def mean_pass_hat_k(
    results: Sequence[ScenarioTrials], k: int, scenario: str | None = None
) -> float | None:
    """pass^k averaged over the scenarios that have at least k trials (None: none has)."""
    values = [
        r.pass_hat_k[k]
        for r in results
        if k in r.pass_hat_k and (scenario is None or r.scenario_id == scenario)
    ]
    return sum(values) / len(values) if values else None


def trials_to_dict(results: Sequence[ScenarioTrials]) -> dict[str, object]:
    """The JSON of `evaluate --format json` (`trials`)."""
    most = max((r.trials for r in results), default=0)
    return {
        "scenarios": [
            {
                "scenario": r.scenario_id,
                "trials": r.trials,
                "passed": r.passed,
                "pass_hat_k": {str(k): v for k, v in r.pass_hat_k.items()},
            }
            for r in results
        ],
        "mean_pass_hat_k": {str(k): mean_pass_hat_k(results, k) for k in range(1, most + 1)},
    }


@dataclass
class GateResult:
    gate: Gate
    measured: float | None
    passed: bool

    def describe(self) -> str:
        what, target = self.gate.measure
        scope = self.gate.scope
        if self.measured is None:
            allowed = "allowed by allow_empty" if self.gate.allow_empty else "an empty gate fails"
            nothing = (
                f"no scenario with {self.gate.pass_k} trials in this run"
                if self.gate.pass_k is not None
                else "no score in this run"
            )
            return f"{scope}: no {what} to measure, {nothing} ({allowed})"
        return f"{scope}: {what} {self.measured:.3f} (needs >= {target})"


@dataclass
class RunResult:
    run_id: str
    status: str  # succeeded, gate_failed, interrupted, failed
    window_start: dt.datetime | None
    window_end: dt.datetime
    snapshot: int
    # what the run counted: nothing yet when it starts
    candidates: int = 0  # conversations in the window (after filters)
    sampled: int = 0
    skipped: int = 0  # already scored by this suite version
    scored: int = 0
    score_count: int = 0
    error_count: int = 0
    elapsed_s: float = 0.0
    summary: list[SummaryRow] = field(default_factory=list)
    gates: list[GateResult] = field(default_factory=list)
    judge: dict[str, Any] | None = None  # calls, cache hits, skipped, tokens, cost, limits
    window_from: str = ""  # where the window's start came from
    empty_because: str | None = None  # why no conversation was in the window
    warnings: list[str] = field(default_factory=list)  # what measured nothing (see strict)
    failures: list[str] = field(default_factory=list)  # what fails the run besides gates
    strict: bool = False  # warnings fail the run
    simulation_id: str | None = None  # the simulation whose conversations the run scored
    # per scenario: trials, passed, pass^k (`runs.trials.ScenarioTrials`); empty but for a
    # simulation
    trials: list[ScenarioTrials] = field(default_factory=list)
    # what `--export-otlp` did (`export_otlp.ExportOutcome.as_dict`); a failed export is a
    # warning here, never a failure of the run
    export: dict[str, Any] | None = None
    # what sending the run's figures as OTLP metrics did (`otlp_metrics.MetricsOutcome`)
    metrics_export: dict[str, Any] | None = None

    @property
    def gates_passed(self) -> bool:
        return all(g.passed for g in self.gates)

    @property
    def passed(self) -> bool:
        """Every gate passed and nothing else failed the run (too few conversations,
        warnings in strict mode)."""
        return self.gates_passed and not self.failures

    def to_dict(self) -> dict[str, Any]:
        """The run as a JSON-ready document (`spanscore evaluate --format json`)."""

        def when(moment: dt.datetime | None) -> str | None:
            return moment.astimezone(dt.UTC).isoformat() if moment is not None else None

        return {
            "run_id": self.run_id,
            "status": self.status,
            "passed": self.passed,
            "window": {
                "start": when(self.window_start),
                "end": when(self.window_end),
                "start_from": self.window_from,
                "empty_because": self.empty_because,
            },
            "snapshot": self.snapshot,
            "counts": {
                "candidates": self.candidates,
                "sampled": self.sampled,
                "skipped": self.skipped,
                "scored": self.scored,
                "scores": self.score_count,
                "errors": self.error_count,
            },
            "summary": [
                {
                    "scenario": r.scenario_id,
                    "metric": r.metric,
                    "conversations": r.conversations,
                    "judged": r.judged,
                    "pass_rate": r.pass_rate,
                    "mean": r.mean,
                    "errors": r.errors,
                    "worst": r.worst,
                }
                for r in self.summary
            ],
            "gates": [
                {
                    **g.gate.model_dump(exclude_none=True),
                    "measured": g.measured,
                    "passed": g.passed,
                    "description": g.describe(),
                }
                for g in self.gates
            ],
            "warnings": self.warnings,
            "failures": self.failures,
            "strict": self.strict,
            "judge": self.judge,
            "simulation_id": self.simulation_id,
            "trials": trials_to_dict(self.trials) if self.simulation_id else None,
            "export": self.export,
            "metrics_export": self.metrics_export,
            "elapsed_s": round(self.elapsed_s, 3),
        }


class RunInterrupted(Exception):
    def __init__(self, result: RunResult) -> None:
        self.result = result
        super().__init__(f"run {result.run_id} interrupted after {result.scored} conversations")

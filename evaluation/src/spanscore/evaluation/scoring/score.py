"""Scores and the metric registry.

Every assertion and metric returns one `Score`; a run stores it as one row of the `scores`
table. Custom metrics are plain functions decorated with `@metric`, registered by name::

    from spanscore.evaluation import Score, Trajectory, metric

    @metric(threshold=0.5)
    def verification_compliance(trajectory: Trajectory) -> Score:
        ...
        return Score(value=0.8, explanation="verified before cancelling")

A metric may also return a bool (pass/fail), a number (a value in [0, 1], passed against its
threshold) or a string (a label); `as_score` turns each into a `Score`. A metric that raises is
recorded as an `error` score for that conversation, never as a failed run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from spanscore.evaluation.llm.types import JudgeAnswer

ScoreKind = Literal["numeric", "label", "pass_fail"]


@dataclass(frozen=True)
class Score:
    """One judgement of one conversation: the `scores` row without its run and names."""

    value: float | None = None
    label: str | None = None
    passed: bool | None = None
    threshold: float | None = None
    explanation: str | None = None
    details: Mapping[str, Any] | None = None
    error: str | None = None

    @classmethod
    def failed_with(cls, error: str, **details: Any) -> Score:
        """No score could be given (the metric raised, the judge timed out, ...)."""
        return cls(error=error, details=details or None)


def judge_failed(answer: JudgeAnswer) -> Score:
    """The score of a judgement the judge could not give, or the budget left unasked."""
    if answer.skipped is not None:
        return Score(error=answer.skipped, details={"skipped": answer.skipped})
    return Score.failed_with(answer.problem)

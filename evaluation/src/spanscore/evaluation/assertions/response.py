"""`response`: checks of the final answer (keywords, pattern, similarity to an expected text)."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import (
    Field,
    field_validator,
)

from spanscore.evaluation.matching.arguments import (
    text_similarity,
)
from spanscore.evaluation.matching.patterns import check_pattern
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- the final answer --------------------------------------------------------------------------


@assertion
class ResponseAssertion(AssertionBase):
    """Checks of the final answer (the last turn's). Score: the fraction of checks that pass;
    passes when all do."""

    type: Literal["response"]
    keywords: list[str] = Field(default_factory=list, description="all must appear (any case)")
    any_keywords: list[str] = Field(default_factory=list, description="at least one must appear")
    forbidden_keywords: list[str] = Field(default_factory=list, description="none may appear")
    pattern: str | None = Field(None, description="regular expression searched in the answer")
    expected: str | None = Field(None, description="reference answer, compared by similarity")
    similarity_threshold: float = Field(0.8, ge=0, le=1)
    every_turn: bool = Field(False, description="check every turn's answer, not only the last")

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            check_pattern(pattern)
        return pattern

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        if self.every_turn:
            answers = [t.final_response for t in trajectory.turns]
        else:
            answers = [trajectory.final_response]
        checks: list[tuple[str, bool]] = []
        for answer in answers:
            checks += self._checks(answer or "")
        failed = [name for name, ok in checks if not ok]
        value = sum(ok for _, ok in checks) / len(checks) if checks else 1.0
        return self.graded(
            value,
            not failed,
            explanation="answer passes every check" if not failed else "; ".join(failed),
            details={"checks": [{"check": n, "passed": ok} for n, ok in checks]},
        )

    def _checks(self, answer: str) -> list[tuple[str, bool]]:
        lowered = answer.casefold()
        checks = [(f"contains {k!r}", k.casefold() in lowered) for k in self.keywords]
        if self.any_keywords:
            found = any(k.casefold() in lowered for k in self.any_keywords)
            checks.append((f"contains one of {self.any_keywords}", found))
        checks += [
            (f"does not contain {k!r}", k.casefold() not in lowered)
            for k in self.forbidden_keywords
        ]
        if self.pattern is not None:
            checks.append(
                (f"matches /{self.pattern}/", re.search(self.pattern, answer) is not None)
            )
        if self.expected is not None:
            similarity = text_similarity(self.expected, answer)
            checks.append(
                (
                    f"similar to the reference ({similarity:.2f} >= {self.similarity_threshold:g})",
                    similarity >= self.similarity_threshold,
                )
            )
        return checks

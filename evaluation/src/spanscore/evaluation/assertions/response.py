"""`response`: checks of the agent's answers (keywords, pattern, similarity to an expected text):
the final answer, every turn's, or every agent message at once."""

from __future__ import annotations

import re
import unicodedata
from typing import Literal

from pydantic import (
    Field,
    field_validator,
    model_validator,
)

from spanscore.evaluation.matching.arguments import (
    text_similarity,
)
from spanscore.evaluation.matching.patterns import check_pattern
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ModelCall, Trajectory

_THOUSANDS = re.compile(r"(?<=\d)[,\u00a0\u202f](?=\d{3}(?!\d))")

# --- the final answer --------------------------------------------------------------------------


@assertion
class ResponseAssertion(AssertionBase):
    """Checks of the final answer (the last turn's; every turn's with `every_turn`; every agent
    message at once with `in_any_message`). Score: the fraction of checks that pass; passes
    when all do."""

    type: Literal["response"]
    keywords: list[str] = Field(default_factory=list, description="all must appear (any case)")
    any_keywords: list[str] = Field(default_factory=list, description="at least one must appear")
    forbidden_keywords: list[str] = Field(default_factory=list, description="none may appear")
    pattern: str | None = Field(None, description="regular expression searched in the answer")
    expected: str | None = Field(None, description="reference answer, compared by similarity")
    similarity_threshold: float = Field(0.8, ge=0, le=1)
    every_turn: bool = Field(False, description="check every turn's answer, not only the last")
    in_any_message: bool = Field(
        False,
        description="search every agent message at once (each turn's answer and the model's "
        "intermediate texts): a keyword or pattern passes when some message has it, a "
        "forbidden keyword fails when any has it",
    )
    intermediate_messages: bool = Field(
        True,
        description="with in_any_message: also the model's intermediate texts (false: the "
        "turns' answers only, the messages sent to the user)",
    )
    ignore_case: bool = Field(True, description="keywords match in any case")
    ignore_punctuation: bool = Field(
        False, description="punctuation is removed from the text and the keywords before matching"
    )
    ignore_thousands_separators: bool = Field(
        False,
        description="a comma or a (narrow) no-break space between digit groups is removed from "
        "the text and the keywords before matching: 1,093.34 matches 1093.34",
    )
    remove_commas: bool = Field(
        False,
        description="every comma is removed from the text (not from the keywords) before "
        "matching: tau-bench's and tau2-bench's rule",
    )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, pattern: str | None) -> str | None:
        if pattern is not None:
            check_pattern(pattern)
        return pattern

    @model_validator(mode="after")
    def _one_scope(self) -> ResponseAssertion:
        if self.every_turn and self.in_any_message:
            raise ValueError("every_turn and in_any_message exclude each other: choose one")
        return self

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        if self.in_any_message:
            return self._any_message(_agent_messages(trajectory, self.intermediate_messages))
        if self.every_turn:
            answers = [t.final_response for t in trajectory.turns]
        else:
            answers = [trajectory.final_response]
        checks: list[tuple[str, bool]] = []
        for answer in answers:
            checks += self._checks([answer or ""])
        return self._score(checks, "answer passes every check")

    def _any_message(self, messages: list[str]) -> Score:
        checks = self._checks(messages)
        score = self._score(checks, f"every check passes in the {len(messages)} agent messages")
        if not messages and checks:
            return self.graded(
                0.0,
                False,
                explanation="the agent said nothing: no message to check",
                details={"checks": [{"check": n, "passed": False} for n, _ in checks],
                         "messages": 0},
            )  # fmt: skip
        return score

    def _score(self, checks: list[tuple[str, bool]], success: str) -> Score:
        failed = [name for name, ok in checks if not ok]
        value = sum(ok for _, ok in checks) / len(checks) if checks else 1.0
        return self.graded(
            value,
            not failed,
            explanation=success if not failed else "; ".join(failed),
            details={"checks": [{"check": n, "passed": ok} for n, ok in checks]},
        )

    def _normal(self, text: str, *, keyword: bool) -> str:
        if self.remove_commas and not keyword:
            text = text.replace(",", "")
        if self.ignore_thousands_separators:
            text = _THOUSANDS.sub("", text)
        if self.ignore_punctuation:
            text = "".join(c for c in text if not unicodedata.category(c).startswith("P"))
        if self.ignore_case:
            text = text.casefold()
        return text

    def _checks(self, texts: list[str]) -> list[tuple[str, bool]]:
        """The checks over `texts`: one answer, or every agent message (a keyword is found
        when some text has it)."""
        normal = [self._normal(t, keyword=False) for t in texts]

        def found(keyword: str) -> bool:
            wanted = self._normal(keyword, keyword=True)
            return any(wanted in text for text in normal)

        checks = [(f"contains {k!r}", found(k)) for k in self.keywords]
        if self.any_keywords:
            checks.append(
                (f"contains one of {self.any_keywords}", any(map(found, self.any_keywords)))
            )
        checks += [(f"does not contain {k!r}", not found(k)) for k in self.forbidden_keywords]
        if self.pattern is not None:
            hit = any(re.search(self.pattern, t) is not None for t in texts)
            checks.append((f"matches /{self.pattern}/", hit))
        if self.expected is not None:
            similarity = max((text_similarity(self.expected, t) for t in texts), default=0.0)
            checks.append(
                (
                    f"similar to the reference ({similarity:.2f} >= {self.similarity_threshold:g})",
                    similarity >= self.similarity_threshold,
                )
            )
        return checks


def _agent_messages(trajectory: Trajectory, intermediate: bool) -> list[str]:
    """Every text the agent said: the model's intermediate texts (when asked for) and each
    turn's answer."""
    texts: list[str] = []
    for turn in trajectory.turns:
        for step in turn.steps if intermediate else ():
            if isinstance(step, ModelCall) and step.response_text:
                texts.append(step.response_text)
        if turn.final_response and turn.final_response not in texts[-1:]:
            texts.append(turn.final_response)
    return texts

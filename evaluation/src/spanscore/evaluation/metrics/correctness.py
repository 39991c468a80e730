"""`correctness`: names F1, names-and-order LCS, or calls-with-arguments F1 (Dokimos
ToolCorrectnessEvaluator)."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
    model_validator,
)

from spanscore.evaluation.assertions.expected import ExpectedCall, normalize_name
from spanscore.evaluation.matching.arguments import ArgMode, match_arguments
from spanscore.evaluation.matching.pairing import fits_exactly, max_weight_matching
from spanscore.evaluation.metrics.common import Graded
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory

# --- correctness -------------------------------------------------------------------------------


def f1(true_positives: int, actual: int, expected: int) -> float:
    """Dokimos' F1: 1 when both sides are empty, 0 when one is."""
    if actual == 0 and expected == 0:
        return 1.0
    if actual == 0 or expected == 0:
        return 0.0
    precision, recall = true_positives / actual, true_positives / expected
    return 0.0 if precision + recall == 0 else 2 * precision * recall / (precision + recall)


def lcs_length(a: list[str], b: list[str]) -> int:
    """Length of the longest common subsequence of two name lists."""
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b, 1):
            current.append(previous[j - 1] + 1 if x == y else max(previous[j], current[j - 1]))
        previous = current
    return previous[-1]


@assertion
class Correctness(Graded):
    """Did the agent use the expected tools? (Dokimos ToolCorrectnessEvaluator.)

    - `names_only` (default): F1 of the set of tool names used against the set expected.
    - `names_and_order`: LCS(actual names, expected names) / max(len(actual), len(expected)),
      1.0 when both are empty.
    - `names_and_args`: F1 of matched calls, a call matching when its name is the expected one
      and its arguments match (tolerant: 1 == 1.0, any key order; `arguments` mode, per-call
      `match` and `rules`). Calls are paired by maximum matching, where Dokimos pairs first-fit.

    F1 is 1.0 when nothing was expected and nothing called, 0.0 when only one side is empty."""

    type: Literal["correctness"]
    expected: list[ExpectedCall] = Field(
        description="expected calls (a bare tool name is enough for the name modes)"
    )
    mode: Literal["names_only", "names_and_order", "names_and_args"] = Field(
        "names_only", description="what is compared: name sets, name order, or whole calls"
    )
    arguments: ArgMode = Field(
        "exact",
        description="names_and_args: how argument key sets compare when a call gives no `match`",
    )
    normalize_names: bool = Field(
        False, description="ignore case and the separators - _ . in tool names"
    )

    @model_validator(mode="after")
    def _one_each(self) -> Correctness:
        for call in self.expected:
            repeated = {"optional", "min", "max"} & call.model_fields_set
            if repeated:
                raise ValueError(
                    f"correctness counts each expected call once: {', '.join(sorted(repeated))} "
                    f"(on {call.name}) belong to the tool_calls assertion"
                )
        return self

    def _key(self, name: str) -> str:
        return normalize_name(name) if self.normalize_names else name

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        actual = trajectory.tool_calls
        if self.mode == "names_only":
            return self._names_only(actual)
        if self.mode == "names_and_order":
            return self._names_and_order(actual)
        return self._names_and_args(actual)

    def _names_only(self, actual: list[ToolCall]) -> Score:
        used = list(dict.fromkeys(self._key(c.name) for c in actual))
        wanted = list(dict.fromkeys(self._key(e.name) for e in self.expected))
        correct = [n for n in used if n in wanted]
        redundant = [n for n in used if n not in wanted]
        missing = [n for n in wanted if n not in used]
        explanation = (
            f"Correct: {correct or 'none'}, redundant: {redundant or 'none'}, "
            f"missing: {missing or 'none'}."
        )
        return self.scored(
            f1(len(correct), len(used), len(wanted)),
            explanation,
            {"correct": correct, "redundant": redundant, "missing": missing},
        )

    def _names_and_order(self, actual: list[ToolCall]) -> Score:
        used = [self._key(c.name) for c in actual]
        wanted = [self._key(e.name) for e in self.expected]
        lcs = lcs_length(used, wanted)
        longest = max(len(used), len(wanted))
        value = lcs / longest if longest else 1.0
        return self.scored(
            value,
            f"Order similarity {value:.2f} (LCS {lcs}/{longest}).",
            {
                "lcs": lcs,
                "actual": used,
                "expected": wanted,
                "redundant": [n for n in dict.fromkeys(used) if n not in wanted],
                "missing": [n for n in dict.fromkeys(wanted) if n not in used],
            },
        )

    def _names_and_args(self, actual: list[ToolCall]) -> Score:
        keys = [self._key(c.name) for c in actual]
        weights: list[list[float | None]] = []
        for e in self.expected:
            wanted = self._key(e.name)
            weights.append(
                [
                    1.0 if k == wanted and self._matches(e, c) else None
                    for k, c in zip(keys, actual, strict=True)
                ]
            )
        pairs = max_weight_matching(weights) if actual and self.expected else []
        matched = len(pairs)
        paired_actual = {j for _, j in pairs}
        paired_expected = {i for i, _ in pairs}
        value = f1(matched, len(actual), len(self.expected))
        if not actual and not self.expected:
            explanation = "No tool call expected and none made."
        else:
            explanation = (
                f"{matched} of {len(actual)} actual and {matched} of {len(self.expected)} "
                "expected tool calls matched (with arguments)."
            )
        return self.scored(
            value,
            explanation,
            {
                "matched": [{"expected_index": i, "actual_index": j} for i, j in pairs],
                "unmatched_expected": [
                    e.name for i, e in enumerate(self.expected) if i not in paired_expected
                ],
                "unmatched_actual": [
                    c.name for j, c in enumerate(actual) if j not in paired_actual
                ],
                **(
                    {"notes": ["paired greedily, not optimally (too large to pair exactly)"]}
                    if not fits_exactly(len(self.expected), len(actual))
                    else {}
                ),
            },
        )

    def _matches(self, expected: ExpectedCall, call: ToolCall) -> bool:
        if self._key(expected.name) != self._key(call.name):
            return False
        result = match_arguments(
            expected.arguments,
            call.arguments,
            mode=expected.match or self.arguments,
            rules=expected.rules,
        )
        return result.passed

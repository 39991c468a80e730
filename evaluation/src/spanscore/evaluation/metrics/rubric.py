"""`tool_call_rubric`: Arcade's weighted critics and rubric (`EvalCase.evaluate`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    AliasChoices,
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from spanscore.evaluation.assertions.expected import normalize_name
from spanscore.evaluation.matching.critics import Critic, argument, critic_weights
from spanscore.evaluation.matching.pairing import max_weight_matching
from spanscore.evaluation.metrics.common import plural
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- Arcade's rubric ---------------------------------------------------------------------------


def same_tool_name(expected: str, actual: str) -> bool:
    """Arcade's `compare_tool_name`: case and the separators `-`, `_`, `.` do not matter
    (nor spaces: the project's one name normalisation)."""
    return normalize_name(expected) == normalize_name(actual)


class RubricCall(BaseModel):
    """An expected call of a rubric (Arcade's ExpectedToolCall / ExpectedMCPToolCall; its
    `tool_name` and `args` spellings are accepted). A bare tool name is enough."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    string_shorthand: ClassVar[dict[str, Any]] = {"type": "string", "description": "tool name"}

    name: str = Field(
        validation_alias=AliasChoices("name", "tool_name"),
        description="tool name (compared ignoring case and - _ .)",
    )
    arguments: dict[str, Any] = Field(
        default_factory=dict,
        validation_alias=AliasChoices("arguments", "args"),
        description="expected arguments, read by the critics by field",
    )

    @model_validator(mode="before")
    @classmethod
    def _bare_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data  # no arguments expected


CriticEntry = Annotated[Critic, Field(discriminator="type")]


@assertion
class ToolCallRubric(AssertionBase):
    """Arcade's EvalCase scoring: the calls against the expected ones, judged by weighted
    critics, graded by a rubric.

    In order: with `fail_on_tool_call_quantity`, a different number of calls scores 0; no
    expected and no actual call scores 1; with `fail_on_tool_selection`, a different multiset
    of tool names scores 0; without critics, 1. Otherwise expected and actual calls are paired
    to maximise the summed pair score (tool-selection weight when the names match, plus each
    critic's score where both values are present), then every pair adds the tool-selection
    score and every critic's score (a critic that cannot judge, e.g. a missing number, scores
    0 with its weight counted). Value: total score / total weight. Label: `passed` at
    `fail_threshold` or more, `warned` when passed but below `warn_threshold`, else `failed`.
    """

    type: Literal["tool_call_rubric"]
    # (critic weights, expected values per critic, normalised expected names)
    _prepared: tuple[list[float], list[list[Any]], list[str]] | None = PrivateAttr(None)
    expected: list[RubricCall] = Field(description="the expected tool calls")
    critics: list[CriticEntry] = Field(
        default_factory=list,
        description="per-argument critics: binary, numeric, similarity, datetime",
    )
    fail_threshold: float = Field(0.8, ge=0, le=1, description="lowest passing score")
    warn_threshold: float = Field(
        0.9, ge=0, le=1, description="a passing score below this is labelled warned"
    )
    fail_on_tool_selection: bool = Field(
        True, description="score 0 when the tool names differ (as multisets)"
    )
    fail_on_tool_call_quantity: bool = Field(
        True, description="score 0 when the number of calls differs from the expected"
    )
    tool_selection_weight: float = Field(
        1.0, ge=0, description="weight of a paired call's tool-name match"
    )

    @model_validator(mode="after")
    def _no_threshold(self) -> ToolCallRubric:
        if self.threshold is not None:
            raise ValueError("a rubric passes at fail_threshold: set that instead of threshold")
        return self

    def _score(
        self, value: float, explanation: str, details: dict[str, Any], reason: str | None = None
    ) -> Score:
        passed = value >= self.fail_threshold
        label = "failed" if not passed else "warned" if value < self.warn_threshold else "passed"
        if reason is not None:
            details = {"failure_reason": reason, **details}
        return Score(
            value=min(1.0, max(0.0, value)),
            label=label,
            passed=passed,
            threshold=self.fail_threshold,
            explanation=explanation,
            details=details,
        )

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        actual = [
            (c.name, c.arguments if isinstance(c.arguments, Mapping) else {})
            for c in trajectory.tool_calls
        ]
        expected_names = [e.name for e in self.expected]
        actual_names = [name for name, _ in actual]
        names = {"expected_tools": expected_names, "actual_tools": actual_names}
        if self.fail_on_tool_call_quantity and len(actual) != len(self.expected):
            reason = f"expected {len(self.expected)} tool call(s), got {len(actual)}"
            return self._score(0.0, f"Failed: {reason}.", names, reason)
        if not self.expected and not actual:
            return self._score(1.0, "No tool call expected and none made.", names)
        if self.fail_on_tool_selection and not self._same_selection(expected_names, actual_names):
            reason = f"tool selection mismatch: expected {expected_names}, got {actual_names}"
            return self._score(0.0, f"Failed: {reason}.", names, reason)
        if not self.critics:
            return self._score(1.0, "The expected tools were selected (no critics).", names)
        if self._prepared is None:  # the expectation does not change: read it once
            self._prepared = (
                critic_weights(self.critics),
                [[argument(e.arguments, c.field) for c in self.critics] for e in self.expected],
                [normalize_name(e.name) for e in self.expected],
            )
        weights, wanted, expected_keys = self._prepared
        critics = list(zip(self.critics, weights, strict=True))
        got = [[argument(args, c.field) for c in self.critics] for _, args in actual]
        actual_keys = [normalize_name(name) for name in actual_names]
        selection_weight = self.tool_selection_weight
        judged: dict[tuple[int, int, int], Any] = {}  # each judgement made once, reused below
        # Every pair's score, as Arcade's cost matrix: the tool-selection weight when the
        # names match, plus each critic's score where both values are present (a critic that
        # cannot judge adds nothing).
        pair_weights: list[list[float | None]] = []
        for i, key in enumerate(expected_keys):
            want_row = wanted[i]
            row: list[float | None] = []
            for j, actual_key in enumerate(actual_keys):
                score = selection_weight if key == actual_key else 0.0
                got_row = got[j]
                for k, (critic, weight) in enumerate(critics):
                    want, value = want_row[k], got_row[k]
                    if want is None or value is None:
                        continue
                    try:
                        judgement = judged[(i, j, k)] = critic.judge(want, value, weight)
                    except Exception:
                        continue
                    score += judgement.score
                row.append(score)
            pair_weights.append(row)
        pairs = self._pairs(pair_weights)
        total = weight_sum = 0.0
        results: list[dict[str, Any]] = []
        for i, j in pairs:
            expected = self.expected[i]
            name = actual[j][0]
            selected = expected_keys[i] == actual_keys[j]
            selection = selection_weight if selected else 0.0
            total += selection
            weight_sum += selection_weight
            critiques = []
            for k, (critic, weight) in enumerate(critics):
                want, value = wanted[i][k], got[j][k]
                try:
                    judgement = judged.get((i, j, k)) or critic.judge(want, value, weight)
                    match, score, error = judgement.match, judgement.score, None
                except Exception as exc:  # as Arcade: a critic that cannot judge scores 0
                    match, score, error = False, 0.0, f"{type(exc).__name__}: {exc}"
                total += score
                weight_sum += weight
                critiques.append(
                    {
                        "field": critic.field,
                        "critic": critic.type,
                        "match": match,
                        "score": score,
                        "weight": weight,
                        "expected": want,
                        "actual": value,
                        **({"error": error} if error else {}),
                    }
                )
            results.append(
                {
                    "expected_index": i,
                    "actual_index": j,
                    "expected": expected.name,
                    "actual": name,
                    "tool_selection": {"match": selected, "score": selection},
                    "critics": critiques,
                }
            )
        value = total / weight_sum if weight_sum > 0 else 0.0
        misses = [
            f"{c['field']} of {r['expected']}"
            for r in results
            for c in r["critics"]
            if not c["match"]
        ]
        explanation = f"Rubric score {value:.2f} over {plural(len(pairs), 'paired call')}"
        explanation += f"; no match for {', '.join(misses[:4])}." if misses else "."
        return self._score(value, explanation, {**names, "pairs": results})

    def _same_selection(self, expected: list[str], actual: list[str]) -> bool:
        # Arcade zips the two sorted lists (so with unequal counts only the shorter length is
        # compared); sorting normalised names makes the order agree with the comparison.
        return all(
            same_tool_name(e, a)
            for e, a in zip(
                sorted(expected, key=normalize_name),
                sorted(actual, key=normalize_name),
                strict=False,
            )
        )

    @staticmethod
    def _pairs(weights: list[list[float | None]]) -> list[tuple[int, int]]:
        """The optimal assignment, completed (as Arcade's square cost matrix is) so that
        min(expected, actual) pairs are always scored."""
        pairs = list(max_weight_matching(weights))
        used_rows = {i for i, _ in pairs}
        used_cols = {j for _, j in pairs}
        free_cols = [j for j in range(len(weights[0]) if weights else 0) if j not in used_cols]
        for i in range(len(weights)):
            if i not in used_rows and free_cols:
                pairs.append((i, free_cols.pop(0)))
        return sorted(pairs)

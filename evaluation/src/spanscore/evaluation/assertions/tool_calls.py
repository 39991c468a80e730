"""`tool_calls`: the calls made against the calls expected, in one of the match modes
(`assertions.modes`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import (
    Field,
    PrivateAttr,
    field_validator,
)

from spanscore.evaluation.assertions.call_pairing import score_calls
from spanscore.evaluation.assertions.expected import (
    ArgumentOverride,
    CallMatcher,
    ExpectedStep,
    Item,
    normalize_name,
)
from spanscore.evaluation.assertions.modes import Mode, docstring_table
from spanscore.evaluation.matching.arguments import (
    ArgMode,
)
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory


@assertion
class ToolCallsAssertion(AssertionBase):
    __doc__ = f"""The calls made against the calls expected. Modes (pass rule; score):

{docstring_table()}
    """  # generated from the table of modes (`assertions.modes`)

    type: Literal["tool_calls"]
    mode: Mode = Field("strict", description="how the calls made are compared")
    expected: list[ExpectedStep] = Field(
        default_factory=list,
        description="expected calls, in order; a list inside the list is a parallel step "
        "(calls requested by the same model response, in any order)",
    )
    arguments: ArgMode = Field(
        "exact", description="argument key-set mode for expected calls that give arguments"
    )
    tools: dict[str, ArgumentOverride] = Field(
        default_factory=dict, description="per-tool argument settings (match, rules)"
    )
    normalize_names: bool = Field(
        False, description="compare tool names ignoring case and the separators - _ . space"
    )
    check_parallel: bool = Field(
        True, description="parallel steps must have been requested by one model response"
    )
    failed_calls: Literal["made", "not_made"] = Field(
        "made",
        description="not_made: a call that failed (its tool raised or returned an error) counts "
        "as not made, so only the calls that took effect are compared",
    )
    ignore_tools: list[str] = Field(
        default_factory=list,
        description="calls to these tools are left out before comparing (read-only tools that "
        "a task leaves free); with normalize_names, names compare normalised",
    )

    _prepared: list[Item] | None = PrivateAttr(None)

    @field_validator("expected", mode="before")
    @classmethod
    def _none_is_empty(cls, value: Any) -> Any:
        return [] if value is None else value

    def may_judge(self, registry: MetricRegistry) -> bool:
        return has_judged_rules(self._items(), self.tools)

    def _items(self) -> list[Item]:
        items: list[Item] = []
        for group, step in enumerate(self.expected):
            calls = step if isinstance(step, list) else [step]
            for call in calls:
                low, high = call.bounds
                items.append(
                    Item(call, len(items), group if isinstance(step, list) else None, low, high)
                )
        return items

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        matcher = CallMatcher(self.arguments, self.tools, self.normalize_names)
        prepared = self._prepared
        if prepared is None:  # the expectation does not change: prepare it once
            prepared = self._prepared = self._items()
        made = trajectory.tool_calls
        kept = [
            index
            for index, call in enumerate(made)
            if not (self.failed_calls == "not_made" and call.error is not None)
            and not (self.ignore_tools and self._ignored(call.name))
        ]
        if len(kept) == len(made):
            return score_calls(self, prepared, made, matcher)
        score = score_calls(self, prepared, [made[i] for i in kept], matcher)
        details = dict(score.details or {})
        # positions in the trajectory, as the report marks them, not in the calls compared
        for key in ("actual_index", "not_allowed_index"):
            if isinstance(details.get(key), list):
                details[key] = [kept[i] for i in details[key]]
        compared = set(kept)
        details["left_out"] = [
            {
                "index": i,
                "name": made[i].name,
                "why": "ignored tool" if self._ignored(made[i].name) else "failed",
            }
            for i in range(len(made))
            if i not in compared
        ]
        return dataclasses.replace(score, details=details)

    def _ignored(self, name: str) -> bool:
        if self.normalize_names:
            return normalize_name(name) in {normalize_name(n) for n in self.ignore_tools}
        return name in self.ignore_tools


def has_judged_rules(items: Sequence[Item], overrides: Mapping[str, ArgumentOverride]) -> bool:
    rules = [r for item in items for r in item.call.rules.values()]
    rules += [r for o in overrides.values() for r in o.rules.values()]
    return any(r.strategy == "judged" for r in rules)

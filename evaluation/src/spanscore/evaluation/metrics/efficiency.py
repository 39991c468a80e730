"""`efficiency`: distinct calls / calls, with loops reported (Dokimos ToolEfficiencyEvaluator)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import (
    Field,
)

from spanscore.evaluation.matching.arguments import values_equal
from spanscore.evaluation.metrics.common import Graded, call_arguments, plural, ratio
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import ToolCall, Trajectory

# --- efficiency --------------------------------------------------------------------------------


@assertion
class Efficiency(Graded):
    """Distinct calls / calls (Dokimos ToolEfficiencyEvaluator): a call is redundant when an
    earlier call has the same name and equal arguments (tolerant equality: 1 == 1.0, any key
    order). Runs of consecutive duplicates are reported as loops. 1.0 without calls.

    A signal more than a gate: a legitimate retry lowers the score. The threshold defaults to
    1.0 as in Dokimos; tune it (or list volatile arguments in `ignore_arguments`)."""

    type: Literal["efficiency"]
    ignore_arguments: list[str] = Field(
        default_factory=list,
        description="top-level arguments left out of the comparison (request ids, timestamps)",
    )
    names_only: bool = Field(
        False, description="two calls of the same tool are duplicates whatever their arguments"
    )

    def same(self, a: ToolCall, b: ToolCall) -> bool:
        if a.name != b.name:
            return False
        if self.names_only:
            return True
        return values_equal(self._comparable(a), self._comparable(b))

    def _comparable(self, call: ToolCall) -> Any:
        arguments = call_arguments(call)
        if isinstance(arguments, Mapping) and self.ignore_arguments:
            return {k: v for k, v in arguments.items() if k not in self.ignore_arguments}
        return arguments

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        calls = trajectory.tool_calls
        distinct: list[ToolCall] = []
        # Calls bucketed by a key that equal calls always share (numbers as floats: 1 == 1.0),
        # so each call is compared only with its few look-alikes: linear in the calls.
        buckets: dict[tuple[str, Any], list[ToolCall]] = {}
        redundant: list[dict[str, Any]] = []
        loops: list[dict[str, Any]] = []
        for index, call in enumerate(calls):
            key = (call.name, None if self.names_only else _bucket(self._comparable(call)))
            bucket = buckets.setdefault(key, [])
            if any(self.same(seen, call) for seen in bucket):
                redundant.append({"index": index, "name": call.name})
            else:
                distinct.append(call)
                bucket.append(call)
            if index and self.same(calls[index - 1], call):
                if loops and loops[-1]["last_index"] == index - 1:
                    loops[-1]["calls"] += 1
                    loops[-1]["last_index"] = index
                else:
                    loops.append(
                        {
                            "name": call.name,
                            "first_index": index - 1,
                            "last_index": index,
                            "calls": 2,
                        }
                    )
        if not calls:
            explanation = "No tool calls to inspect."
        else:
            explanation = (
                f"{len(distinct)}/{len(calls)} calls were distinct "
                f"({len(redundant)} redundant, {plural(len(loops), 'loop')})."
            )
        return self.scored(
            ratio(len(distinct), len(calls)),
            explanation,
            {
                "total": len(calls),
                "distinct": len(distinct),
                "redundant": redundant,
                "loops": loops,
            },
        )


def _bucket(value: Any) -> Any:
    """A hashable key that `values_equal` values share (it may also join unequal ones: the
    bucket is checked with `values_equal`)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value if not isinstance(value, bool) else ("bool", value)
    if isinstance(value, int | float):
        return ("number", float(value))
    if isinstance(value, Mapping):
        return ("object", frozenset((str(k), _bucket(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return ("array", tuple(_bucket(v) for v in value))
    return ("other", repr(value))

"""`forbidden`: calls that must never be made; `order`: every call to B comes after a call to A."""

from __future__ import annotations

from typing import Literal

from pydantic import (
    Field,
)

from spanscore.evaluation.assertions.expected import (
    CallMatcher,
    ExpectedCall,
    Item,
    normalize_name,
)
from spanscore.evaluation.assertions.tool_calls import has_judged_rules
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- forbidden calls and ordering constraints --------------------------------------------------


@assertion
class ForbiddenCallsAssertion(AssertionBase):
    """Calls that must never be made (by name, optionally with arguments: `match` defaults to
    partial here, so `{name: cancel_order, arguments: {order_id: X}}` forbids cancelling X).
    Value 1 when none was made, else 0."""

    type: Literal["forbidden"]
    calls: list[ExpectedCall] = Field(description="calls that must not be made")
    normalize_names: bool = False

    def may_judge(self, registry: MetricRegistry) -> bool:
        return has_judged_rules([Item(c, i, None, 1, 1) for i, c in enumerate(self.calls)], {})

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        matcher = CallMatcher("partial", {}, self.normalize_names)
        made = []
        for index, call in enumerate(trajectory.tool_calls):
            if any(matcher.weight(f, call) is not None for f in self.calls):
                made.append({"index": index, "name": call.name, "arguments": call.arguments})
        names = ", ".join(m["name"] for m in made)
        return self.graded(
            0.0 if made else 1.0,
            not made,
            explanation=f"forbidden call(s) made: {names}" if made else "no forbidden call",
            details={"violations": made},
        )


@assertion
class OrderAssertion(AssertionBase):
    """Every call to `after` comes after a call to `before` (with `require_success`: a call
    that did not fail). Score: the fraction of `after` calls that respect it (1 when none)."""

    type: Literal["order"]
    before: str = Field(description="tool that must come first")
    after: str = Field(description="tool that may only come after it")
    require_success: bool = Field(False, description="only a successful `before` call counts")
    normalize_names: bool = False

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        key = normalize_name if self.normalize_names else (lambda n: n)
        before, after = key(self.before), key(self.after)
        seen_before = False
        total = ok = 0
        violations = []
        for index, call in enumerate(trajectory.tool_calls):
            name = key(call.name)
            if name == after:
                total += 1
                if seen_before:
                    ok += 1
                else:
                    violations.append(index)
            if name == before and (call.error is None or not self.require_success):
                seen_before = True
        what = f"{self.after} after {'a successful ' if self.require_success else ''}"
        explanation = (
            f"every {what}{self.before}"
            if not violations
            else f"{len(violations)} of {total} {self.after} call(s) before any {self.before}"
        )
        return self.graded(
            ok / total if total else 1.0,
            not violations,
            explanation=explanation,
            details={"violations": violations, "checked": total},
        )

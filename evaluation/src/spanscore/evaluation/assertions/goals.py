"""`goals`: a goal dependency graph of required calls and text goals (watsonx Orchestrate's
ground truth shape), passing when every goal is met in an order its dependencies allow."""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Iterator, Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    model_validator,
)

from spanscore.evaluation.assertions.expected import CallMatcher, ExpectedCall
from spanscore.evaluation.matching.arguments import (
    ArgMode,
    ArgumentRule,
    text_similarity,
)
from spanscore.evaluation.scoring.assertion import AssertionBase
from spanscore.evaluation.scoring.plugins import assertion
from spanscore.evaluation.scoring.registry import EvalContext, MetricRegistry
from spanscore.evaluation.scoring.score import Score
from spanscore.evaluation.trajectory.model import Trajectory

# --- goal dependency graphs --------------------------------------------------------------------

WatsonxArgMatch = Literal["strict", "fuzzy", "ignore", "optional"]


class Goal(BaseModel):
    """One goal: a tool call (`tool_call`) or a text answer (`text`), as in watsonx
    Orchestrate's `goal_details`."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["tool_call", "text"]
    name: str
    tool_name: str | None = None
    args: dict[str, Any] | None = None
    arg_matching: dict[str, WatsonxArgMatch | ArgumentRule] = Field(
        default_factory=dict,
        description="per argument: strict (default), fuzzy (similarity), ignore, optional, or "
        "a spanscore rule",
    )
    match: ArgMode = Field("exact", description="argument key sets (watsonx: exact)")
    response: str | None = None
    keywords: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _tool_named(self) -> Goal:
        if self.type == "tool_call" and not self.tool_name:
            raise ValueError("a tool_call goal needs tool_name")
        return self

    def rules(self, similarity_threshold: float) -> dict[str, ArgumentRule]:
        rules = {}
        for key, how in self.arg_matching.items():
            if isinstance(how, ArgumentRule):
                rules[key] = how
            elif how == "fuzzy":
                rules[key] = ArgumentRule(strategy="similarity", threshold=similarity_threshold)
            elif how != "strict":
                rules[key] = ArgumentRule(strategy=how)
        return rules


# Steps the goals search may take per conversation (each a goal tried at one point): far more
# than any realistic goal graph needs; past it the best placement found so far is kept.
_SEARCH_LIMIT = 100_000


@assertion
class GoalsAssertion(AssertionBase):
    """A goal dependency graph: `goals` maps a goal to the goals that depend on it. Passes
    (Journey Success) when every goal is met and each after the goals it depends on. Score: the
    fraction of goals met in order."""

    type: Literal["goals"]
    goals: dict[str, list[str]] = Field(
        default_factory=dict, description="goal -> goals that depend on it"
    )
    goal_details: list[Goal]
    similarity_threshold: float = Field(0.8, ge=0, le=1, description="for fuzzy arguments")
    normalize_names: bool = False
    _expected: dict[str, ExpectedCall] = PrivateAttr(default_factory=dict)
    _plan: list[tuple[Goal, list[str]]] | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _graph(self) -> GoalsAssertion:
        names = [g.name for g in self.goal_details]
        if len(set(names)) != len(names):
            raise ValueError("goal names in goal_details must be unique")
        known = set(names)
        for goal, dependents in self.goals.items():
            for name in (goal, *dependents):
                if name not in known:
                    raise ValueError(f"goal {name!r} is not in goal_details")
        self._order()  # raises on a cycle
        return self

    def _order(self) -> list[str]:
        """Goals in an order their dependencies allow (Kahn; ties in goal_details order)."""
        needs: dict[str, set[str]] = {g.name: set() for g in self.goal_details}
        for goal, dependents in self.goals.items():
            for dependent in dependents:
                needs[dependent].add(goal)
        order: list[str] = []
        ready = [g.name for g in self.goal_details if not needs[g.name]]
        while ready:
            name = ready.pop(0)
            order.append(name)
            for other in self.goal_details:
                if name in needs[other.name]:
                    needs[other.name].discard(name)
                    if not needs[other.name] and other.name not in order + ready:
                        ready.append(other.name)
        if len(order) != len(needs):
            cycle = sorted(set(needs) - set(order))
            raise ValueError(f"the goal graph has a cycle through {', '.join(cycle)}")
        return order

    def may_judge(self, registry: MetricRegistry) -> bool:
        rules = [r for g in self.goal_details for r in g.rules(self.similarity_threshold).values()]
        return any(r.strategy == "judged" for r in rules)

    def evaluate(self, trajectory: Trajectory, context: EvalContext) -> Score:
        # One timeline of tool calls and answers, in order.
        timeline: list[tuple[str, Any]] = []
        for turn in trajectory.turns:
            for call in turn.tool_calls:
                timeline.append(("call", call))
            if turn.final_response is not None:
                timeline.append(("text", turn.final_response))
        plan = self._plan
        if plan is None:  # the graph does not change: work it out once
            prerequisites: dict[str, list[str]] = {g.name: [] for g in self.goal_details}
            for source, dependents in self.goals.items():
                for dependent in dependents:
                    prerequisites[dependent].append(source)
            by_name = {g.name: g for g in self.goal_details}
            plan = self._plan = [(by_name[n], prerequisites[n]) for n in self._order()]
        matcher = CallMatcher("exact", {}, self.normalize_names)
        placed = self._best_placement(plan, timeline, matcher)
        report: dict[str, dict[str, Any]] = {}
        for goal, needs in plan:
            name = goal.name
            if name in placed:
                report[name] = {"met": True, "at": placed[name]}
                continue
            blocked = [p for p in needs if p not in placed]
            earliest = max((placed[p] for p in needs if p in placed), default=-1)
            found, why = self._place(goal, timeline, set(), earliest, matcher)
            if found is None:
                reason = why
            elif blocked:
                reason = f"depends on unmet {', '.join(blocked)}"
            else:
                reason = f"each {goal.tool_name} call that fits it meets another goal"
            report[name] = {"met": False, "reason": reason}
        tool_goals = [g for g in self.goal_details if g.type == "tool_call"]
        calls = sum(1 for kind, _ in timeline if kind == "call")
        met_calls = sum(1 for g in tool_goals if report[g.name]["met"])
        met = sum(1 for r in report.values() if r["met"])
        failed = [n for n, r in report.items() if not r["met"]]
        explanation = (
            "journey success: every goal met in order"
            if not failed
            else "; ".join(f"{n}: {report[n]['reason']}" for n in failed)
        )
        return self.graded(
            met / len(report) if report else 1.0,
            not failed,
            explanation=explanation,
            details={
                "goals": report,
                "failed": failed,
                "tool_call_precision": met_calls / calls if calls else 1.0,
                "tool_call_recall": met_calls / len(tool_goals) if tool_goals else 1.0,
            },
        )

    def _best_placement(
        self,
        plan: list[tuple[Goal, list[str]]],
        timeline: Sequence[tuple[str, Any]],
        matcher: CallMatcher,
    ) -> dict[str, int]:
        """Where each met goal is met, for the most goals met: each tool call meets at most one
        goal and every goal comes after the goals it depends on. An exact branch and bound
        over the goals in dependency order, earliest placements first (so the first solution
        is the greedy one and ties keep it); it stops at a solution meeting every goal, or
        after `_SEARCH_LIMIT` steps with the best found so far."""
        matches = {goal.name: self._matches(goal, timeline, matcher) for goal, _ in plan}
        total = len(plan)
        best: list[Any] = [-1, {}]
        placed: dict[str, int] = {}
        used: set[int] = set()
        steps = [0]

        def search(k: int, count: int) -> None:
            steps[0] += 1
            if count + (total - k) <= best[0]:
                return
            if k == total:
                best[0], best[1] = count, dict(placed)
                return
            goal, needs = plan[k]
            if all(p in placed for p in needs):
                earliest = max((placed[p] for p in needs), default=-1)
                found = matches[goal.name]
                # Lazily, from the first point after `earliest`: a step costs the goals
                # skipped over (at most one per goal used), not the conversation's length.
                options: Iterator[int] = (
                    found[x]
                    for x in range(bisect.bisect_right(found, earliest), len(found))
                    if found[x] not in used
                )
                if goal.type == "text":
                    options = itertools.islice(options, 1)  # not used up: the earliest is best
                for index in options:
                    placed[goal.name] = index
                    if goal.type == "tool_call":
                        used.add(index)
                    search(k + 1, count + 1)
                    del placed[goal.name]
                    used.discard(index)
                    if best[0] == total or steps[0] > _SEARCH_LIMIT:
                        return
            search(k + 1, count)

        search(0, 0)
        return dict(best[1])

    def _matches(
        self, goal: Goal, timeline: Sequence[tuple[str, Any]], matcher: CallMatcher
    ) -> list[int]:
        """Every point of the timeline that meets the goal, ignoring order and use."""
        if goal.type == "text":
            return [
                index
                for index, (kind, text) in enumerate(timeline)
                if kind == "text"
                and all(k.casefold() in str(text).casefold() for k in goal.keywords)
            ]
        expected = self._expected_call(goal)
        found = []
        for index, (kind, call) in enumerate(timeline):
            if kind == "call":
                result = matcher.compare(expected, call)
                if result is not None and result.passed:
                    found.append(index)
        return found

    def _expected_call(self, goal: Goal) -> ExpectedCall:
        expected = self._expected.get(goal.name)
        if expected is None:  # built once per goal, not per conversation
            expected = self._expected[goal.name] = ExpectedCall(
                name=goal.tool_name or "",
                arguments=goal.args,
                match=goal.match,
                rules=goal.rules(self.similarity_threshold),
            )
        return expected

    def _place(
        self,
        goal: Goal,
        timeline: Sequence[tuple[str, Any]],
        used: set[int],
        after: int,
        matcher: CallMatcher,
    ) -> tuple[int | None, str]:
        """The earliest point after `after` that meets the goal, or why none does."""
        if goal.type == "text":
            best = 0.0
            for index, (kind, text) in enumerate(timeline):
                if kind != "text" or index <= after:
                    continue
                lowered = str(text).casefold()
                if all(k.casefold() in lowered for k in goal.keywords):
                    return index, ""
                if goal.response:
                    best = max(best, text_similarity(goal.response, str(text)))
            wanted = ", ".join(goal.keywords) or "an answer"
            return None, f"no answer after its dependencies contains {wanted}"
        expected = self._expected_call(goal)
        problems: list[str] = []
        earlier = False
        for index, (kind, call) in enumerate(timeline):
            if kind != "call" or index in used:
                continue
            result = matcher.compare(expected, call)
            if result is None:
                continue
            if not result.passed:
                problems += result.problems
            elif index <= after:
                earlier = True
            else:
                return index, ""
        if earlier:
            return None, f"{goal.tool_name} was called before the goals it depends on"
        if problems:
            return None, f"{goal.tool_name} arguments differ: " + "; ".join(problems[:3])
        return None, f"{goal.tool_name} was not called"
